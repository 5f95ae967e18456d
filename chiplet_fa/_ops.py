"""Fake (meta) kernels so torch.compile traces the operators, and the autograd formulas."""
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


# Autograd of fwd. The lse output is marked non-differentiable: nothing in chiplet_fa feeds it
# into a loss, and the backward kernel takes no lse gradient.
def _fwd_setup_context(ctx, inputs, output):
    q, k, v, softmax_scale, causal, mapping, num_xcds = inputs
    out, softmax_lse = output
    ctx.save_for_backward(q, k, v, out, softmax_lse)
    ctx.options = (softmax_scale, causal, mapping, num_xcds)
    ctx.mark_non_differentiable(softmax_lse)


def _fwd_backward(ctx, dout, _dlse):
    q, k, v, out, softmax_lse = ctx.saved_tensors
    if dout.stride(-1) != 1:  # e.g. the expanded gradient of a sum()
        dout = dout.contiguous()
    # Deterministic mode follows torch's global switch, the one users already set for training.
    deterministic = torch.are_deterministic_algorithms_enabled()
    dq, dk, dv = torch.ops.chiplet_fa.bwd(dout, q, k, v, out, softmax_lse, *ctx.options,
                                          deterministic)
    return dq, dk, dv, None, None, None, None


torch.library.register_autograd(f"{_LIB}::fwd", _fwd_backward, setup_context=_fwd_setup_context)


def _bwd_backward(ctx, *grads):
    raise NotImplementedError("chiplet_fa: double backward (a gradient of the attention "
                              "gradients) is not supported")


# Registered so gradients that require grad (create_graph=True) fail loudly when differentiated
# instead of silently getting no graph.
torch.library.register_autograd(f"{_LIB}::bwd", _bwd_backward)
