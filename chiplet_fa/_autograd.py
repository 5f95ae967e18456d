"""Autograd formulas: fwd and fwd_varlen differentiate through bwd and bwd_varlen."""
import torch

_LIB = "chiplet_fa"


def _dout(dout):
    # The gradient of a sum() comes expanded (every stride 0). .contiguous() leaves one with a last
    # dimension of size <= 1, or an empty one, as it is: the op accepts those, having no stride to check.
    return dout if dout.stride(-1) == 1 else dout.contiguous()


# The lse output is marked non-differentiable: nothing in chiplet_fa feeds it into a loss, and the
# backward kernels take no lse gradient. ALiBi slopes get no gradient either (flash-attention's
# convention: they are fixed per head). The backward runs without atomics when the forward was
# asked to be deterministic or under torch's global switch, the one users already set for training.
def _fwd_setup_context(ctx, inputs, output):
    q, k, v, softmax_scale, causal, mapping, num_xcds, left, right, softcap, alibi, deterministic = inputs
    out, softmax_lse = output
    ctx.save_for_backward(q, k, v, out, softmax_lse, alibi)
    ctx.options = (softmax_scale, causal, mapping, num_xcds)
    ctx.mask = (left, right, softcap)
    ctx.deterministic = deterministic
    ctx.mark_non_differentiable(softmax_lse)


def _deterministic(ctx):
    return ctx.deterministic or torch.are_deterministic_algorithms_enabled()


def _fwd_backward(ctx, dout, _dlse):
    q, k, v, out, softmax_lse, alibi = ctx.saved_tensors
    dq, dk, dv = torch.ops.chiplet_fa.bwd(_dout(dout), q, k, v, out, softmax_lse, *ctx.options,
                                          _deterministic(ctx), *ctx.mask, alibi)
    return (dq, dk, dv) + (None,) * 9


torch.library.register_autograd(f"{_LIB}::fwd", _fwd_backward, setup_context=_fwd_setup_context)


def _fwd_varlen_setup_context(ctx, inputs, output):
    (q, k, v, cu_q, cu_k, max_q, max_k, softmax_scale, causal, left, right, softcap, alibi, mapping, num_xcds,
     deterministic) = inputs
    out, softmax_lse = output
    ctx.save_for_backward(q, k, v, out, softmax_lse, cu_q, cu_k, alibi)
    ctx.options = (max_q, max_k, softmax_scale, causal, left, right, softcap)
    ctx.mapping = (mapping, num_xcds)
    ctx.deterministic = deterministic
    ctx.mark_non_differentiable(softmax_lse)


def _fwd_varlen_backward(ctx, dout, _dlse):
    q, k, v, out, softmax_lse, cu_q, cu_k, alibi = ctx.saved_tensors
    dq, dk, dv = torch.ops.chiplet_fa.bwd_varlen(_dout(dout), q, k, v, out, softmax_lse, cu_q, cu_k, *ctx.options,
                                                 alibi, *ctx.mapping, _deterministic(ctx))
    return (dq, dk, dv) + (None,) * 13


torch.library.register_autograd(f"{_LIB}::fwd_varlen", _fwd_varlen_backward,
                                setup_context=_fwd_varlen_setup_context)


def _not_differentiable(what):
    def backward(ctx, *grads):
        raise NotImplementedError(f"chiplet_fa: {what}")
    return backward


# Registered so a graph through them fails loudly when differentiated instead of silently
# getting no gradient. (fwd_varlen.out mutates `out`, so torch allows no formula for it; torch
# itself refuses to differentiate through it.)
torch.library.register_autograd(f"{_LIB}::bwd", _not_differentiable(
    "double backward (a gradient of the attention gradients) is not supported"))
torch.library.register_autograd(f"{_LIB}::bwd_varlen", _not_differentiable(
    "double backward (a gradient of the attention gradients) is not supported"))
