"""Reference attention built for differentiation, in any dtype: run in float64 it gives the
reference gradients; run in the input dtype it gives the error budget of the 2x rule. Unlike
reference.py's (nan_to_num after exp(-inf - -inf)), rows without keys carry no NaN into the
backward graph. Masks and score modifiers as reference.py defines them."""
import torch

from reference import scores_ref


def attention_ref(q, k, v, causal=False, softmax_scale=None, window=(-1, -1), softcap=0.0, alibi_slopes=None):
    """q (B, N_q, H_q, D), k/v (B, N_k, H_kv, D); a row with no visible key outputs 0 (and so gets
    zero gradients), as chiplet_fa.fwd defines it."""
    d = q.size(3)
    group = q.size(2) // k.size(2)
    scale = d ** -0.5 if softmax_scale is None else softmax_scale
    qh = q.transpose(1, 2)
    kh = k.transpose(1, 2).repeat_interleave(group, dim=1)
    vh = v.transpose(1, 2).repeat_interleave(group, dim=1)
    s = scores_ref(qh, kh, scale, causal, window, softcap, alibi_slopes)
    row_max = s.amax(dim=-1, keepdim=True).detach() if s.shape[-1] else s.new_zeros(s.shape[:-1] + (1,))
    row_max = torch.where(torch.isinf(row_max), torch.zeros_like(row_max), row_max)
    e = torch.exp(s - row_max)
    denom = e.sum(dim=-1, keepdim=True)
    p = e / torch.where(denom == 0, torch.ones_like(denom), denom)
    return (p @ vh).transpose(1, 2)


def attention_grads_ref(q, k, v, dout, causal=False, softmax_scale=None, dtype=None, **masks):
    """(dq, dk, dv) of sum(attention_ref(q, k, v) * dout), computed in `dtype` (default: q's)."""
    dtype = dtype or q.dtype
    leaves = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
    out = attention_ref(*leaves, causal=causal, softmax_scale=softmax_scale, **masks)
    return torch.autograd.grad(out, leaves, dout.to(dtype))
