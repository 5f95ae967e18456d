"""flash-attention 2's Python API over chiplet_fa's operators.

The six functions of `flash_attn` (flash_attn_func, flash_attn_varlen_func and their qkv/kv-packed
forms) with flash-attention 2's argument names, order, defaults and return conventions, so that

    from flash_attn import flash_attn_func, flash_attn_varlen_func
becomes
    from chiplet_fa import flash_attn_func, flash_attn_varlen_func

and nothing else changes. Two keyword-only arguments follow flash-attention's: `mapping` and
`num_xcds` (chiplet_fa's workgroup mapping, see chiplet_fa.attention).

Differences, all of which raise ValueError naming the argument rather than change results:
  * dropout_p must be 0.0 (no dropout kernels);
  * block_table (paged KV cache) must be None.
Conventions kept: window_size entries below 0 mean unbounded; softcap <= 0 means none (as in
flash-attention); return_attn_probs=True returns (out, softmax_lse, S_dmask) where S_dmask is the
empty tensor flash-attention itself returns when dropout_p == 0 (it only fills it under dropout).
One documented difference in values: a query row that sees no key at all (e.g. causal with
seqlen_q > seqlen_k) has out 0 in both, but softmax_lse -inf here where flash-attention gives +inf.
"""
import torch

__all__ = ["flash_attn_func", "flash_attn_varlen_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func",
           "flash_attn_varlen_qkvpacked_func", "flash_attn_varlen_kvpacked_func"]


def _contiguous_last(t):
    return t if t.stride(-1) == 1 else t.contiguous()


def _options(fn, dropout_p, window_size, softcap):
    """Checks what flash-attention accepts and chiplet_fa does not; maps its conventions onto the op's."""
    if dropout_p != 0.0:
        raise ValueError(f"chiplet_fa.{fn}: dropout_p must be 0.0 (chiplet_fa has no attention dropout), "
                         f"got {dropout_p}")
    if len(window_size) != 2:
        raise ValueError(f"chiplet_fa.{fn}: window_size must be a pair (left, right), got {window_size!r}")
    left, right = (max(int(w), -1) for w in window_size)  # flash-attention: any negative = unbounded
    softcap = float(softcap) if softcap > 0 else 0.0  # flash-attention: <= 0 deactivates
    return left, right, softcap


def _result(out, softmax_lse, return_attn_probs):
    if not return_attn_probs:
        return out
    # flash-attention returns S_dmask only under dropout; with dropout_p == 0 it is this empty tensor.
    return out, softmax_lse, torch.empty((0,), dtype=out.dtype, device=out.device)


def _dense(fn, q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
           return_attn_probs, mapping, num_xcds):
    left, right, softcap = _options(fn, dropout_p, window_size, softcap)
    out, lse = torch.ops.chiplet_fa.fwd(_contiguous_last(q), _contiguous_last(k), _contiguous_last(v), softmax_scale,
                                        bool(causal), mapping, num_xcds, left, right, softcap, alibi_slopes,
                                        bool(deterministic))
    return _result(out, lse, return_attn_probs)


def _varlen(fn, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
            window_size, softcap, alibi_slopes, deterministic, return_attn_probs, mapping, num_xcds):
    left, right, softcap = _options(fn, dropout_p, window_size, softcap)
    out, lse = torch.ops.chiplet_fa.fwd_varlen(
        _contiguous_last(q), _contiguous_last(k), _contiguous_last(v), cu_seqlens_q, cu_seqlens_k,
        int(max_seqlen_q), int(max_seqlen_k), softmax_scale, bool(causal), left, right, softcap, alibi_slopes,
        mapping, num_xcds, bool(deterministic))
    return _result(out, lse, return_attn_probs)


def _unpack(fn, name, packed, count, dim):
    if packed.dim() <= dim or packed.size(dim) != count:
        raise ValueError(f"chiplet_fa.{fn}: {name} must have size {count} in dimension {dim}, "
                         f"got shape {tuple(packed.shape)}")
    return packed.unbind(dim)


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False, *, mapping: str = "auto",
                    num_xcds: int = -1):
    """flash_attn.flash_attn_func: q (B, N_q, H_q, D), k/v (B, N_k, H_kv, D), H_q a multiple of H_kv.

    causal and window_size (left, right) are aligned to the bottom-right corner: query i sees keys
    i + N_k - N_q - left .. i + N_k - N_q + right (negative: unbounded; causal: right = 0).
    softcap > 0: scores -> softcap * tanh(scores / softcap). alibi_slopes: float32 (H_q,) or
    (B, H_q), adds -slope * |i + N_k - N_q - j|. deterministic: the backward runs without atomics.
    Returns out (B, N_q, H_q, D), or (out, softmax_lse (B, H_q, N_q) float32 (float64 for float64
    inputs), empty S_dmask) when return_attn_probs. dropout_p must be 0.0.
    """
    return _dense("flash_attn_func", q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                  deterministic, return_attn_probs, mapping, num_xcds)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None, *, mapping: str = "auto",
                           num_xcds: int = -1):
    """flash_attn.flash_attn_varlen_func: packed q (total_q, H_q, D), k/v (total_k, H_kv, D); int32
    cu_seqlens_q/k (B + 1) and host max_seqlen_q/k (an int, or a 0-d tensor that is read once).
    Masks as flash_attn_func, per sequence. Returns out (total_q, H_q, D), or (out, softmax_lse
    (H_q, total_q), empty S_dmask) when return_attn_probs. dropout_p must be 0.0 and block_table
    (paged KV cache) None.
    """
    if block_table is not None:
        raise ValueError("chiplet_fa.flash_attn_varlen_func: block_table (a paged KV cache) is not supported; "
                         "pass k and v packed as (total_k, num_heads_k, head_dim)")
    return _varlen("flash_attn_varlen_func", q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                   dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                   return_attn_probs, mapping, num_xcds)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                              mapping: str = "auto", num_xcds: int = -1):
    """flash_attn.flash_attn_qkvpacked_func: qkv (B, N, 3, H, D); as flash_attn_func, and the
    gradient comes back as one (B, N, 3, H, D) tensor."""
    q, k, v = _unpack("flash_attn_qkvpacked_func", "qkv", qkv, 3, 2)
    return _dense("flash_attn_qkvpacked_func", q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                  alibi_slopes, deterministic, return_attn_probs, mapping, num_xcds)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                             softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                             mapping: str = "auto", num_xcds: int = -1):
    """flash_attn.flash_attn_kvpacked_func: q (B, N_q, H_q, D), kv (B, N_k, 2, H_kv, D); as
    flash_attn_func."""
    k, v = _unpack("flash_attn_kvpacked_func", "kv", kv, 2, 2)
    return _dense("flash_attn_kvpacked_func", q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                  alibi_slopes, deterministic, return_attn_probs, mapping, num_xcds)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None, causal=False,
                                     window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False, *, mapping: str = "auto", num_xcds: int = -1):
    """flash_attn.flash_attn_varlen_qkvpacked_func: qkv (total, 3, H, D), one cu_seqlens and
    max_seqlen for queries and keys; as flash_attn_varlen_func."""
    q, k, v = _unpack("flash_attn_varlen_qkvpacked_func", "qkv", qkv, 3, 1)
    return _varlen("flash_attn_varlen_qkvpacked_func", q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
                   dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                   return_attn_probs, mapping, num_xcds)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                                    softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False, return_attn_probs=False, *,
                                    mapping: str = "auto", num_xcds: int = -1):
    """flash_attn.flash_attn_varlen_kvpacked_func: q (total_q, H_q, D), kv (total_k, 2, H_kv, D);
    as flash_attn_varlen_func."""
    k, v = _unpack("flash_attn_varlen_kvpacked_func", "kv", kv, 2, 1)
    return _varlen("flash_attn_varlen_kvpacked_func", q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                   max_seqlen_k, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                   return_attn_probs, mapping, num_xcds)
