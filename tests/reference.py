"""fp64 reference attention shared by every test (forward now, backward later).

Layout as the op: q (B, N_q, H_q, D), k/v (B, N_k, H_kv, D) with H_q a multiple of H_kv.
Causal masks are bottom-right aligned: query row i sees key j <= i + N_k - N_q. A row that sees
no key gives out 0 and lse -inf, as the op promises.
"""
import math
from typing import Optional

import torch


def causal_mask(seqlen_q: int, seqlen_k: int, device=None) -> torch.Tensor:
    """Boolean (N_q, N_k) mask, True where a query may see a key (bottom-right aligned)."""
    rows = torch.arange(seqlen_q, device=device).unsqueeze(1)
    cols = torch.arange(seqlen_k, device=device).unsqueeze(0)
    return cols <= rows + (seqlen_k - seqlen_q)


def attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                  softmax_scale: Optional[float] = None, dtype: torch.dtype = torch.float64):
    """Returns (out (B, N_q, H_q, D) in `dtype`, lse (B, H_q, N_q) in `dtype`).

    dtype=float64 is the reference; passing the inputs' own dtype gives "the same math done by
    PyTorch in the input dtype", the yardstick of flash-attention's tolerance rule.
    """
    batch, seqlen_q, num_q_heads, head_dim = q.shape
    seqlen_k, num_kv_heads = k.shape[1], k.shape[2]
    assert num_q_heads % num_kv_heads == 0
    group = num_q_heads // num_kv_heads
    scale = 1.0 / math.sqrt(head_dim) if softmax_scale is None else softmax_scale
    qh = q.to(dtype).transpose(1, 2)  # (B, H_q, N_q, D)
    kh = k.to(dtype).transpose(1, 2).repeat_interleave(group, dim=1)
    vh = v.to(dtype).transpose(1, 2).repeat_interleave(group, dim=1)
    scores = torch.matmul(qh * scale, kh.transpose(-1, -2))  # (B, H_q, N_q, N_k)
    if causal:
        scores = scores.masked_fill(~causal_mask(seqlen_q, seqlen_k, q.device), float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # -inf on rows that see no key (and when N_k == 0)
    probs = torch.exp(scores - lse.unsqueeze(-1))
    probs = torch.nan_to_num(probs, nan=0.0)  # fully masked rows: exp(-inf - -inf)
    out = torch.matmul(probs, vh).transpose(1, 2)
    return out, lse


def fully_masked_rows(seqlen_q: int, seqlen_k: int, causal: bool) -> torch.Tensor:
    """Boolean (N_q,): rows that see no key at all."""
    if seqlen_k == 0:
        return torch.ones(seqlen_q, dtype=torch.bool)
    if not causal:
        return torch.zeros(seqlen_q, dtype=torch.bool)
    return torch.arange(seqlen_q) + (seqlen_k - seqlen_q) < 0


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
