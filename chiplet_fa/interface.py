"""User-facing functions over torch.ops.chiplet_fa."""
from typing import Optional, Tuple

import torch

from . import _args
from .flash_api import _dense


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              softmax_scale: Optional[float] = None, mapping: str = "auto",
              num_xcds: int = -1, window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
              alibi_slopes: Optional[torch.Tensor] = None) -> torch.Tensor:
    """FlashAttention forward in flash-attention's layout.

    q: (B, N_q, H_q, D); k, v: (B, N_k, H_kv, D) with H_q a multiple of H_kv (GQA/MQA).
    causal masks are aligned to the bottom-right corner when N_q != N_k; window_size (left, right)
    keeps keys i + N_k - N_q - left .. i + N_k - N_q + right for query i (negative: unbounded);
    softcap > 0 caps scores to softcap * tanh(score / softcap) (<= 0: none); alibi_slopes (H_q,)
    or (B, H_q) float32 subtracts slope * |i + N_k - N_q - j|. Returns (B, N_q, H_q, D).

    Checked and run as chiplet_fa.flash_attn_func is: a bad argument raises ValueError naming it,
    and a q, k or v whose last dimension has a stride other than 1 is copied to a contiguous one
    (torch.ops.chiplet_fa.fwd itself refuses it).
    """
    return _dense("attention", q, k, v, 0.0, softmax_scale, causal, window_size, softcap, alibi_slopes, False, False,
                  mapping, num_xcds)


def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 attn_mask: Optional[torch.Tensor] = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: Optional[float] = None,
                                 enable_gqa: bool = False) -> torch.Tensor:
    """Drop-in for torch.nn.functional.scaled_dot_product_attention ((B, H, N, D) layout).

    Follows torch's semantics, including the top-left causal alignment when N_q != N_k.
    attn_mask and dropout are not supported and raise ValueError.
    """
    if attn_mask is not None:
        raise ValueError("chiplet_fa.scaled_dot_product_attention: attn_mask is not supported; "
                         "use is_causal=True or torch's implementation")
    if dropout_p != 0.0:
        raise ValueError(f"chiplet_fa.scaled_dot_product_attention: dropout_p must be 0.0, got {dropout_p}")
    for name, t in (("query", query), ("key", key), ("value", value)):
        if _args.tensor("scaled_dot_product_attention", name, t).dim() != 4:
            raise ValueError(f"chiplet_fa.scaled_dot_product_attention: {name} must be 4-D "
                             f"(batch, num_heads, seqlen, head_dim), got {t.dim()}-D")
    if query.size(1) != key.size(1) and not enable_gqa:
        raise ValueError(f"chiplet_fa.scaled_dot_product_attention: query has {query.size(1)} heads "
                         f"and key {key.size(1)}; pass enable_gqa=True for grouped-query attention")
    q, k, v = (t.transpose(1, 2) for t in (query, key, value))
    n_q, n_k = q.size(1), k.size(1)
    if not is_causal or n_q == n_k:
        out = attention(q, k, v, causal=is_causal, softmax_scale=scale)
    elif n_q < n_k:
        # Top-left alignment: row i sees keys <= i < n_q, so later keys never matter.
        out = attention(q, k[:, :n_q], v[:, :n_q], causal=True, softmax_scale=scale)
    else:
        # Rows below n_k see every key; the first n_k rows form a square causal problem.
        head = attention(q[:, :n_k], k, v, causal=True, softmax_scale=scale)
        tail = attention(q[:, n_k:], k, v, causal=False, softmax_scale=scale)
        out = torch.cat([head, tail], dim=1)
    return out.transpose(1, 2)
