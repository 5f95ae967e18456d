"""Fake (meta) kernels so torch.compile traces the operators without running them."""
import math

import torch

from . import _C

_LIB = "chiplet_fa"
_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@torch.library.register_fake(f"{_LIB}::fwd")
def _fwd_fake(q, k, v, softmax_scale=None, causal=False, mapping="auto", num_xcds=-1):
    # The fake kernel also serves meta tensors and mixed-device calls (a meta tensor outranks
    # CPU in dispatch), so it checks what the C++ front end checks that shapes alone can decide.
    for name, t in (("q", q), ("k", k), ("v", v)):
        torch._check_value(t.dim() == 4, lambda: f"chiplet_fa.fwd: {name} must be 4-D "
                           f"(batch, seqlen, num_heads, head_dim), got {t.dim()}-D")
        torch._check_value(t.dtype == q.dtype, lambda: f"chiplet_fa.fwd: {name} has dtype "
                           f"{t.dtype} but q has {q.dtype}; q, k and v must share one dtype")
        torch._check_value(t.device == q.device, lambda: f"chiplet_fa.fwd: {name} is on "
                           f"{t.device} but q is on {q.device}; q, k and v must be on one device")
        torch._check_value(t.shape[3] == 0 or t.stride(3) == 1, lambda: f"chiplet_fa.fwd: {name} "
                           "must have a contiguous last dimension (stride(-1) == 1), got stride "
                           f"{t.stride(3)}; call .contiguous() first")
    torch._check_value(q.dtype in _DTYPES, lambda: "chiplet_fa.fwd: q must be float16, bfloat16, "
                       f"float32 or float64, got {q.dtype}")
    batch, seqlen_q, num_heads, head_dim = q.shape
    torch._check_value(k.shape[0] == batch and v.shape[0] == batch, lambda: "chiplet_fa.fwd: k "
                       f"and v must have batch {batch} like q, got {k.shape[0]} and {v.shape[0]}")
    torch._check_value(v.shape[1] == k.shape[1] and v.shape[2] == k.shape[2],
                       lambda: f"chiplet_fa.fwd: v must have shape ({batch}, {k.shape[1]}, "
                       f"{k.shape[2]}, D) like k, got {tuple(v.shape)}")
    torch._check_value(k.shape[3] == head_dim and v.shape[3] == head_dim,
                       lambda: f"chiplet_fa.fwd: head dims differ: q has {head_dim}, "
                       f"k has {k.shape[3]}, v has {v.shape[3]}")
    torch._check_value(1 <= head_dim <= 256,
                       lambda: f"chiplet_fa.fwd: head_dim must be in 1..256, got {head_dim}")
    torch._check_value(k.shape[2] >= 1 and num_heads % k.shape[2] == 0,
                       lambda: f"chiplet_fa.fwd: num_heads of q ({num_heads}) must be a positive "
                       f"multiple of num_heads of k/v ({k.shape[2]})")
    torch._check_value(num_xcds == -1 or num_xcds >= 1, lambda: "chiplet_fa.fwd: num_xcds must be "
                       f"-1 (detect) or >= 1, got {num_xcds}")
    torch._check_value(mapping == "auto" or mapping in _C.mapping_names,
                       lambda: "chiplet_fa.fwd: mapping must be one of 'auto', "
                       + ", ".join(f"'{m}'" for m in _C.mapping_names) + f"; got '{mapping}'")
    torch._check_value(softmax_scale is None or math.isfinite(softmax_scale),
                       lambda: f"chiplet_fa.fwd: softmax_scale must be finite, got {softmax_scale}")
    out = q.new_empty((batch, seqlen_q, num_heads, head_dim))
    lse = q.new_empty((batch, num_heads, seqlen_q), dtype=torch.float32)
    return out, lse
