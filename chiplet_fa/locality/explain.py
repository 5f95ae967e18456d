"""chiplet_fa.explain: the mapping the op will use for (q, k, v) and why."""
from typing import List, Optional

import torch

from .. import _C, _args, _ops
from ..build import kernel_path
from .detect import detect_xcds
from .model import Shape, choose_mapping, topology_for_domains


def _offsets(cu, name: str, total: int) -> List[int]:
    """cu_seqlens as a host list, checked as the op checks it on the CPU. On a GPU this is a
    device-to-host copy: fine for a diagnostic, which is why the op itself never does it."""
    values = cu.tolist() if isinstance(cu, torch.Tensor) else list(cu)
    if isinstance(cu, torch.Tensor) and cu.dim() != 1:
        raise ValueError(f"chiplet_fa.explain: {name} must be 1-D, got {cu.dim()}-D")
    if not values or values[0] != 0 or values[-1] != total or any(b < a for a, b in zip(values, values[1:])):
        raise ValueError(f"chiplet_fa.explain: {name} must start at 0, be non-decreasing and end at {total} "
                         f"(the packed rows), got {values}")
    return [int(x) for x in values]


def _packed_shape(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, **common):
    """(exact shape, shape the op's auto decision uses) of a packed batch."""
    cu_q = _offsets(cu_seqlens_q, "cu_seqlens_q", q.shape[0])
    cu_k = _offsets(cu_seqlens_k, "cu_seqlens_k", k.shape[0])
    if len(cu_q) != len(cu_k):
        raise ValueError(f"chiplet_fa.explain: cu_seqlens_q and cu_seqlens_k must have one length (batch + 1), "
                         f"got {len(cu_q)} and {len(cu_k)}")
    lens_q = [b - a for a, b in zip(cu_q, cu_q[1:])]
    lens_k = [b - a for a, b in zip(cu_k, cu_k[1:])]
    bounds = []
    for name, given, lens in (("max_seqlen_q", max_seqlen_q, lens_q), ("max_seqlen_k", max_seqlen_k, lens_k)):
        longest = max(lens, default=0)
        if given is not None and given < longest:
            raise ValueError(f"chiplet_fa.explain: {name} = {given} is shorter than the longest sequence ({longest})")
        bounds.append(longest if given is None else int(given))
    batch = len(lens_q)
    exact = Shape(batch=batch, seqlen_q=bounds[0], seqlen_k=bounds[1], seqlens_q=lens_q, seqlens_k=lens_k,
                  **common)
    # The op's own rule (csrc/locality describe_packed): exact lengths only where it can read
    # cu_seqlens on the host, i.e. for CPU tensors.
    host = q.device.type == "cpu"
    n_q, n_k, op_q, op_k = _C.locality.auto_lengths(batch, bounds[0], bounds[1], q.shape[0], k.shape[0],
                                                    cu_q if host else None, cu_k if host else None)
    if op_q or not batch:
        return exact, exact
    return exact, Shape(batch=batch, seqlen_q=n_q, seqlen_k=n_k, **common)


def _lengths(lens) -> str:
    text = ",".join(str(n) for n in lens[:8])
    return text + (f",... ({len(lens)} sequences)" if len(lens) > 8 else "")


def explain(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
            mapping: str = "auto", num_xcds: int = -1, file=None, *,
            cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q: Optional[int] = None,
            max_seqlen_k: Optional[int] = None) -> dict:
    """Print (to `file`, default stdout; file=False prints nothing) the L2 domains detected
    for q's device, the topology the model assumes, the closed-form prediction per candidate
    mapping and the mapping chiplet_fa.attention(q, k, v, ...) will use. Returns the same as a
    dict, with the kernel path (family) the call runs on q's device. q: (B, N_q, H_q, D); k, v:
    (B, N_k, H_kv, D).

    Packed batch (the layout of torch.ops.chiplet_fa.fwd_varlen): q (T_q, H_q, D), k, v
    (T_k, H_kv, D) with cu_seqlens_q and cu_seqlens_k (B + 1 offsets each; max_seqlen_q/k
    default to the longest sequence). explain reads cu_seqlens on the host (a device-to-host copy
    for GPU tensors: fine for a diagnostic) and predicts the exact ragged batch. The op decides
    with the exact lengths on the CPU but, since it must not copy cu_seqlens to the host, with B
    sequences of the mean length on a GPU: `auto_choice` is the op's decision (from `auto_shape`),
    `exact_choice` the best mapping for the exact lengths, `predicted` is for the exact lengths.
    """
    packed = cu_seqlens_q is not None or cu_seqlens_k is not None
    if packed and (cu_seqlens_q is None or cu_seqlens_k is None):
        raise ValueError("chiplet_fa.explain: a packed batch needs both cu_seqlens_q and cu_seqlens_k")
    # What the op would refuse, explain refuses with the op's checks (its fake kernel's).
    q, k, v = (_args.tensor("explain", name, t) for name, t in (("q", q), ("k", k), ("v", v)))
    _ops._check_qkv("chiplet_fa.explain", q, k, v, packed)
    num_xcds, mapping = _args.integer("explain", "num_xcds", num_xcds), _args.mapping("explain", mapping)
    _ops._check_options("chiplet_fa.explain", q, batch=None, softmax_scale=None, mapping=mapping, num_xcds=num_xcds,
                        window_left=-1, window_right=-1, softcap=0.0, alibi_slopes=None)
    max_seqlen_q = _args.optional_integer("explain", "max_seqlen_q", max_seqlen_q)
    max_seqlen_k = _args.optional_integer("explain", "max_seqlen_k", max_seqlen_k)
    if num_xcds == -1:
        xcds, source, _ = detect_xcds(q.device)
    else:
        xcds, source = num_xcds, "num_xcds argument"
    heads_q, head_dim, heads_kv = q.shape[-2], q.shape[-1], k.shape[-2]
    common = dict(num_q_heads=heads_q, head_dim=head_dim, num_kv_heads=heads_kv, elem_bytes=q.element_size(),
                  causal=causal, block_m=_C.fwd_tile_rows(q))
    if packed:
        shape, auto_shape = _packed_shape(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, **common)
    else:
        shape = auto_shape = Shape(batch=q.shape[0], seqlen_q=q.shape[1], seqlen_k=k.shape[1], **common)
    topo = topology_for_domains(xcds)
    exact_best, predicted = choose_mapping(topo, shape)
    best = exact_best if auto_shape is shape else choose_mapping(topo, auto_shape)[0]
    used = best if mapping == "auto" else mapping
    kernels = kernel_path(q.device)
    report = {"num_xcds": xcds, "xcd_source": source, "topology": topo.name, "shape": shape,
              "auto_shape": auto_shape, "auto_choice": best, "exact_choice": exact_best, "mapping": used,
              "predicted": predicted, "kernel_path": kernels}
    if file is not False:
        kw = shape.kwargs()
        if packed:
            lengths = (f"packed B={shape.batch} N_q={_lengths(shape.seqlens_q)} "
                       f"N_k={_lengths(shape.seqlens_k)}")
        else:
            lengths = f"B={shape.batch} N_q={kw['seqlen_q']} N_k={kw['seqlen_k']}"
        lines = [f"chiplet_fa.explain: {xcds} L2 domain(s) ({source}); model topology {topo!r}",
                 f"  shape {lengths} H_q={heads_q} H_kv={heads_kv} D={head_dim} {q.dtype} causal={causal} "
                 f"BLOCK_M={shape.block_m}",
                 f"  {'mapping':<22}{'L2 hit':>8}{'K/V hit':>9}{'DRAM read':>12}"]
        for name, p in predicted.items():
            mark = "  <- auto" if name == best else ""
            lines.append(f"  {name:<22}{100 * p.hit_rate:7.1f}%{100 * p.kv_hit_rate:8.1f}%"
                         f"{p.dram_read_bytes / 1e9:10.2f} GB{mark}")
        if auto_shape is not shape:
            op = auto_shape.kwargs()
            lines.append(f"  on {q.device.type} the op decides with {auto_shape.batch} sequences of the mean length "
                         f"(N_q={op['seqlen_q']} N_k={op['seqlen_k']}): it does not copy cu_seqlens to the host; "
                         f"the exact lengths favour {exact_best}")
        lines.append(f"  mapping used: {used}" + (" (auto)" if mapping == "auto" else " (requested)")
                     + f"; kernels: {kernels}")
        print("\n".join(lines), file=file)
    return report
