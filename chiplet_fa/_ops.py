"""Fake (meta) kernels so torch.compile traces the operators without running them."""
import torch

_LIB = "chiplet_fa"


@torch.library.register_fake(f"{_LIB}::fwd")
def _fwd_fake(q, k, v, softmax_scale=None, causal=False, mapping="auto", num_xcds=-1):
    torch._check(q.dim() == 4 and k.dim() == 4 and v.dim() == 4,
                 lambda: "chiplet_fa.fwd: q, k and v must be 4-D (batch, seqlen, num_heads, head_dim)")
    torch._check(q.dtype == k.dtype == v.dtype, lambda: "chiplet_fa.fwd: q, k and v must share one dtype")
    batch, seqlen_q, num_heads, head_dim = q.shape
    out = q.new_empty((batch, seqlen_q, num_heads, head_dim))
    lse = q.new_empty((batch, num_heads, seqlen_q), dtype=torch.float32)
    return out, lse


@torch.library.register_fake(f"{_LIB}::bwd")
def _bwd_fake(dout, q, k, v, out, softmax_lse, softmax_scale=None, causal=False, mapping="auto",
              num_xcds=-1, deterministic=False):
    torch._check(dout.shape == q.shape and out.shape == q.shape,
                 lambda: "chiplet_fa.bwd: dout and out must have the shape of q")
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)

