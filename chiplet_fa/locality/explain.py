"""chiplet_fa.explain: the mapping the op will use for (q, k, v) and why."""
from typing import Optional

import torch

from ..build import kernel_path
from .detect import detect_xcds
from .model import MAPPINGS, Shape, choose_mapping, topology_for_domains

# Rows per workgroup of the backend that runs the op (CPU kernel: 64; GPU kernels: 128).
_BLOCK_M = {"cpu": 64}
_GPU_BLOCK_M = 128


def explain(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
            mapping: str = "auto", num_xcds: int = -1, file=None) -> dict:
    """Print (to `file`, default stdout; file=False prints nothing) the L2 domains detected
    for q's device, the topology the model assumes, the closed-form prediction per candidate
    mapping and the mapping chiplet_fa.attention(q, k, v, ...) will use. Returns the same as a
    dict, with the kernel path (family) the call runs on q's device. q: (B, N_q, H_q, D); k, v:
    (B, N_k, H_kv, D)."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError("explain: q, k and v must be 4-D (batch, seqlen, num_heads, head_dim)")
    if k.shape != v.shape:
        raise ValueError(f"explain: k and v must have one shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    if mapping != "auto" and mapping not in MAPPINGS:
        raise ValueError(f"explain: mapping must be 'auto' or one of {', '.join(MAPPINGS)}; got {mapping!r}")
    if num_xcds == -1:
        xcds, source, _ = detect_xcds(q.device)
    elif num_xcds >= 1:
        xcds, source = num_xcds, "num_xcds argument"
    else:
        raise ValueError(f"explain: num_xcds must be -1 (detect) or >= 1, got {num_xcds}")
    batch, seqlen_q, heads_q, head_dim = q.shape
    shape = Shape(batch=batch, num_q_heads=heads_q, seqlen_q=seqlen_q, head_dim=head_dim,
                  num_kv_heads=k.shape[2], seqlen_k=k.shape[1], elem_bytes=q.element_size(),
                  causal=causal, block_m=_BLOCK_M.get(q.device.type, _GPU_BLOCK_M))
    topo = topology_for_domains(xcds)
    best, predicted = choose_mapping(topo, shape)
    used = best if mapping == "auto" else mapping
    kernels = kernel_path(q.device)
    report = {"num_xcds": xcds, "xcd_source": source, "topology": topo.name, "shape": shape,
              "auto_choice": best, "mapping": used, "predicted": predicted, "kernel_path": kernels}
    if file is not False:
        lines = [f"chiplet_fa.explain: {xcds} L2 domain(s) ({source}); model topology {topo!r}",
                 f"  shape B={batch} H_q={heads_q} H_kv={k.shape[2]} N_q={seqlen_q} N_k={k.shape[1]} "
                 f"D={head_dim} {q.dtype} causal={causal} BLOCK_M={shape.block_m}",
                 f"  {'mapping':<22}{'L2 hit':>8}{'K/V hit':>9}{'DRAM read':>12}"]
        for name, p in predicted.items():
            mark = "  <- auto" if name == best else ""
            lines.append(f"  {name:<22}{100 * p.hit_rate:7.1f}%{100 * p.kv_hit_rate:8.1f}%"
                         f"{p.dram_read_bytes / 1e9:10.2f} GB{mark}")
        lines.append(f"  mapping used: {used}" + (" (auto)" if mapping == "auto" else " (requested)")
                     + f"; kernels: {kernels}")
        print("\n".join(lines), file=file)
    return report
