"""Throwaway probe: does the order's speed gap at the small causal shape follow the memory layout?"""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from timing import attention_flops, time_ms  # noqa: E402

import chiplet_fa  # noqa: E402,F401

for (b, h, n, d) in [(8, 16, 2048, 64), (4, 32, 4096, 128), (1, 32, 8192, 64)]:
    flops = attention_flops(b, h, n, n, d, True)
    for layout in ("BNHD", "BHND"):
        shape = (b, n, h, d) if layout == "BNHD" else (b, h, n, d)
        q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        if layout == "BHND":
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        cells = []
        for m in ("block_first", "head_first", "swizzled_head_first"):
            ms = time_ms(lambda: torch.ops.chiplet_fa.fwd(q, k, v, None, True, m, 8), graph=True)
            cells.append(f"{m} {flops / ms / 1e9:.0f}")
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
            ms = time_ms(lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=True), graph=True)
        cells.append(f"cudnn {flops / ms / 1e9:.0f}")
        print(f"B{b} H{h} N{n} D{d} {layout}: " + ", ".join(cells), flush=True)
