"""Autograd formulas: fwd differentiates through the bwd operator."""
import torch

_LIB = "chiplet_fa"


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
