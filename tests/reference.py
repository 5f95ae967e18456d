"""fp64 reference attention shared by every test.

Layout as the op: q (B, N_q, H_q, D), k/v (B, N_k, H_kv, D) with H_q a multiple of H_kv; packed
batches (varlen_ref) are run sequence by sequence. Scores follow flash-attention: s = scale q.k,
softcap c > 0: s = c tanh(s / c), ALiBi: s -= slope |i + N_k - N_q - j|, and query i sees keys
in [i + N_k - N_q - left, i + N_k - N_q + right] (bottom-right aligned; causal: right = 0; -1:
unbounded). A row that sees no key gives out 0 and lse -inf, as the op promises.
"""
import math
from typing import Optional, Tuple

import torch


def visible_keys(seqlen_q: int, seqlen_k: int, causal: bool = False, window: Tuple[int, int] = (-1, -1),
                 device=None) -> torch.Tensor:
    """Boolean (N_q, N_k) mask, True where a query may see a key."""
    rows = torch.arange(seqlen_q, device=device).unsqueeze(1) + (seqlen_k - seqlen_q)
    cols = torch.arange(seqlen_k, device=device).unsqueeze(0)
    left, right = window[0], 0 if causal else window[1]
    mask = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=device)
    if left >= 0:
        mask &= cols >= rows - left
    if right >= 0:
        mask &= cols <= rows + right
    return mask


def causal_mask(seqlen_q: int, seqlen_k: int, device=None) -> torch.Tensor:
    """Boolean (N_q, N_k) mask, True where a query may see a key (bottom-right aligned)."""
    return visible_keys(seqlen_q, seqlen_k, causal=True, device=device)


def scores_ref(qh, kh, scale, causal=False, window=(-1, -1), softcap=0.0, alibi_slopes=None):
    """Masked scores (B, H, N_q, N_k) of head-major qh (B, H, N_q, D), kh (B, H, N_k, D)."""
    s = torch.matmul(qh * scale, kh.transpose(-1, -2))
    n_q, n_k = s.shape[-2], s.shape[-1]
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(s).reshape(-1 if alibi_slopes.dim() == 2 else 1, s.shape[1], 1, 1)
        dist = (torch.arange(n_q, device=s.device)[:, None] + n_k - n_q - torch.arange(n_k, device=s.device)).abs()
        s = s - slopes * dist.to(s)
    return s.masked_fill(~visible_keys(n_q, n_k, causal, window, s.device), float("-inf"))


def attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                  softmax_scale: Optional[float] = None, dtype: torch.dtype = torch.float64,
                  window=(-1, -1), softcap: float = 0.0, alibi_slopes: Optional[torch.Tensor] = None):
    """Returns (out (B, N_q, H_q, D) in `dtype`, lse (B, H_q, N_q) in `dtype`).

    dtype=float64 is the reference; passing the inputs' own dtype gives "the same math done by
    PyTorch in the input dtype", the yardstick of flash-attention's tolerance rule.
    """
    num_q_heads, head_dim = q.shape[2], q.shape[3]
    group = num_q_heads // k.shape[2]
    scale = 1.0 / math.sqrt(head_dim) if softmax_scale is None else softmax_scale
    qh = q.to(dtype).transpose(1, 2)  # (B, H_q, N_q, D)
    kh = k.to(dtype).transpose(1, 2).repeat_interleave(group, dim=1)
    vh = v.to(dtype).transpose(1, 2).repeat_interleave(group, dim=1)
    scores = scores_ref(qh, kh, scale, causal, window, softcap, alibi_slopes)
    lse = torch.logsumexp(scores, dim=-1)  # -inf on rows that see no key (and when N_k == 0)
    probs = torch.exp(scores - lse.unsqueeze(-1))
    probs = torch.nan_to_num(probs, nan=0.0)  # fully masked rows: exp(-inf - -inf)
    out = torch.matmul(probs, vh).transpose(1, 2)
    return out, lse


def varlen_ref(q, k, v, cu_seqlens_q, cu_seqlens_k, reference=attention_ref, alibi_slopes=None, **kwargs):
    """A packed batch (q (T_q, H_q, D), k/v (T_k, H_kv, D)) through a dense reference, sequence by
    sequence: (out (T_q, H_q, D), lse (H_q, T_q)) for attention_ref, the packed out for a
    reference that returns only out (the differentiable one)."""
    results = []
    cu_q, cu_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for b in range(len(cu_q) - 1):
        slopes = alibi_slopes[b] if alibi_slopes is not None and alibi_slopes.dim() == 2 else alibi_slopes
        res = reference(q[None, cu_q[b]:cu_q[b + 1]], k[None, cu_k[b]:cu_k[b + 1]], v[None, cu_k[b]:cu_k[b + 1]],
                        alibi_slopes=slopes, **kwargs)
        results.append(res if isinstance(res, tuple) else (res,))
    outs = torch.cat([r[0][0] for r in results])
    if len(results[0]) == 1:
        return outs
    return outs, torch.cat([r[1][0] for r in results], dim=-1)


def fully_masked_rows(seqlen_q: int, seqlen_k: int, causal: bool, window=(-1, -1)) -> torch.Tensor:
    """Boolean (N_q,): rows that see no key at all."""
    if seqlen_k == 0:
        return torch.ones(seqlen_q, dtype=torch.bool)
    return ~visible_keys(seqlen_q, seqlen_k, causal, window).any(dim=1)


def assert_close_to_ref(actual: torch.Tensor, ref: torch.Tensor, same_dtype: torch.Tensor,
                        floor: float, what: str = "out") -> None:
    """flash-attention's rule: max error vs the fp64 reference at most 2x the error of PyTorch's
    computation in the input dtype, plus `floor`. Infinities must match exactly."""
    actual, ref, same_dtype = (t.detach().double().cpu() for t in (actual, ref, same_dtype))
    assert actual.shape == ref.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(ref.shape)}"
    inf = torch.isinf(ref)
    assert torch.equal(torch.isinf(actual), inf), f"{what}: infinities differ from the reference"
    assert torch.equal(actual[inf], ref[inf]), f"{what}: infinite entries differ in sign"
    assert not torch.isnan(actual).any(), f"{what}: NaN"
    finite = ~inf
    if not finite.any():
        return
    err = (actual[finite] - ref[finite]).abs().max().item()
    base = (same_dtype[finite] - ref[finite]).abs().max().item()
    assert err <= 2 * base + floor, (
        f"{what}: max error {err:.3e} exceeds 2 x {base:.3e} (PyTorch in the input dtype) + {floor:.1e}")
