"""Small launches covering the kernels' edge paths (forward and backward), for compute-sanitizer."""
import torch

import chiplet_fa  # noqa: F401

CASES = [  # (B, N_q, N_k, H_q, H_kv, D, causal, dtype, mapping)
    (2, 200, 333, 4, 2, 128, True, torch.bfloat16, "swizzled_head_first"),
    (1, 333, 77, 6, 3, 64, True, torch.float16, "swizzled_block_first"),
    (1, 129, 300, 2, 1, 56, False, torch.bfloat16, "block_first"),
    (1, 64, 64, 2, 2, 256, True, torch.bfloat16, "head_first"),
    (1, 17, 1, 3, 1, 20, False, torch.float16, "head_first"),
    # head_first at D 72-128: deterministic dQ by ordered reductions (sm90), both orders
    (2, 200, 333, 4, 2, 96, False, torch.bfloat16, "head_first"),
    (1, 300, 200, 4, 1, 128, True, torch.float16, "head_first"),
]
for b, nq, nk, hq, hkv, d, causal, dtype, mapping in CASES:
    print("case", (b, nq, nk, hq, hkv, d, causal, dtype, mapping), flush=True)  # a hang shows where
    q = torch.randn(b, nq, hq, d, device="cuda", dtype=dtype)
    k = torch.randn(b, nk, hkv, d, device="cuda", dtype=dtype)
    v = torch.randn(b, nk, hkv, d, device="cuda", dtype=dtype)
    out, lse = torch.ops.chiplet_fa.fwd(q, k, v, None, causal, mapping, 8)
    dout = torch.randn_like(out)  # atomic and deterministic dQ; D=256 in two column slices
    for deterministic in (False, True):
        torch.ops.chiplet_fa.bwd(dout, q, k, v, out, lse, None, causal, mapping, 8, deterministic)
# Packed batches (an empty sequence, lengths off the tiles) with a sliding window, softcap and ALiBi.
cu = torch.tensor([0, 70, 70, 333, 334], dtype=torch.int32, device="cuda")
for d, dtype in ((128, torch.bfloat16), (64, torch.float16)):
    q, k, v = (torch.randn(334, 4, d, device="cuda", dtype=dtype) for _ in range(3))
    slopes = torch.rand(4, device="cuda")
    for kw in (dict(causal=True, window_left=40), dict(softcap=20.0, alibi_slopes=slopes)):
        print("packed case", d, dtype, list(kw), flush=True)
        out, lse = torch.ops.chiplet_fa.fwd_varlen(q, k, v, cu, cu, 263, 263, **kw)
        for deterministic in (False, True):
            torch.ops.chiplet_fa.bwd_varlen(torch.randn_like(q), q, k, v, out, lse, cu, cu, 263, 263, **kw,
                                            deterministic=deterministic)
torch.cuda.synchronize()
print("sanitize cases ran")
