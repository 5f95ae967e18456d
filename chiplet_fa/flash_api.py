"""flash-attention 2's Python API over chiplet_fa's operators.

The seven functions of `flash_attn` (flash_attn_func, flash_attn_varlen_func and their qkv/kv-packed
forms, flash_attn_with_kvcache) with flash-attention 2's argument names, order, defaults and return conventions, so that

    from flash_attn import flash_attn_func, flash_attn_varlen_func
becomes
    from chiplet_fa import flash_attn_func, flash_attn_varlen_func

and nothing else changes. Two keyword-only arguments follow flash-attention's: `mapping` and
`num_xcds` (chiplet_fa's workgroup mapping, see chiplet_fa.attention).

Differences, all of which raise ValueError naming the argument rather than change results:
  * dropout_p must be 0.0 (no dropout kernels);
  * flash_attn_varlen_func's block_table must be None (flash_attn_with_kvcache takes paged caches);
  * arguments torch would convert silently or refuse with its own TypeError are checked first
    (chiplet_fa/_args.py): tensors must be tensors, window sizes and max_seqlen integers in int64,
    softmax_scale and softcap finite numbers.
Conventions kept: window_size entries below 0 mean unbounded; softcap <= 0 means none (as in
flash-attention); q, k and v whose last dimension has a stride other than 1 are copied to a
contiguous one, as flash-attention does (the ops themselves refuse them); return_attn_probs=True
returns (out, softmax_lse, S_dmask) where S_dmask is the empty tensor flash-attention itself
returns when dropout_p == 0 (it only fills it under dropout). chiplet_fa.attention takes the same
path (_dense), so both APIs check and behave alike.
One documented difference in values: a query row that sees no key at all (e.g. causal with
seqlen_q > seqlen_k) has out 0 in both, but softmax_lse -inf here where flash-attention gives +inf.
"""
import torch

from . import _args

__all__ = ["flash_attn_func", "flash_attn_varlen_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func",
           "flash_attn_varlen_qkvpacked_func", "flash_attn_varlen_kvpacked_func", "flash_attn_with_kvcache"]


def _qkv(fn, q, k, v):
    """q, k and v, each with a stride-1 last dimension: another stride is copied (flash-attention's
    behaviour), where the ops would refuse it."""
    tensors = [_args.tensor(fn, name, t) for name, t in (("q", q), ("k", k), ("v", v))]
    return [t.contiguous() if t.dim() and t.stride(-1) != 1 else t for t in tensors]


def _options(fn, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic, mapping,
             num_xcds):
    """Checks what flash-attention accepts and chiplet_fa does not; maps its conventions onto the
    ops' keyword arguments."""
    if dropout_p != 0.0:
        raise ValueError(f"chiplet_fa.{fn}: dropout_p must be 0.0 (chiplet_fa has no attention dropout), "
                         f"got {dropout_p}")
    left, right = _args.window(fn, window_size)
    return dict(softmax_scale=_args.optional_real(fn, "softmax_scale", softmax_scale), causal=bool(causal),
                window_left=left, window_right=right, softcap=_args.softcap(fn, softcap),
                alibi_slopes=_args.optional_tensor(fn, "alibi_slopes", alibi_slopes),
                mapping=_args.mapping(fn, mapping), num_xcds=_args.integer(fn, "num_xcds", num_xcds),
                deterministic=bool(deterministic))


def _result(out, softmax_lse, return_attn_probs):
    if not return_attn_probs:
        return out
    # flash-attention returns S_dmask only under dropout; with dropout_p == 0 it is this empty tensor.
    return out, softmax_lse, torch.empty((0,), dtype=out.dtype, device=out.device)


def _dense(fn, q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
           return_attn_probs, mapping, num_xcds):
    options = _options(fn, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                       mapping, num_xcds)
    out, lse = torch.ops.chiplet_fa.fwd(*_qkv(fn, q, k, v), **options)
    return _result(out, lse, return_attn_probs)


def _varlen(fn, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
            window_size, softcap, alibi_slopes, deterministic, return_attn_probs, mapping, num_xcds):
    options = _options(fn, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                       mapping, num_xcds)
    cu_seqlens = (_args.tensor(fn, "cu_seqlens_q", cu_seqlens_q), _args.tensor(fn, "cu_seqlens_k", cu_seqlens_k))
    max_seqlens = (_args.integer(fn, "max_seqlen_q", max_seqlen_q), _args.integer(fn, "max_seqlen_k", max_seqlen_k))
    out, lse = torch.ops.chiplet_fa.fwd_varlen(*_qkv(fn, q, k, v), *cu_seqlens, *max_seqlens, **options)
    return _result(out, lse, return_attn_probs)


def _unpack(fn, name, packed, count, dim):
    if _args.tensor(fn, name, packed).dim() <= dim or packed.size(dim) != count:
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
    fn = "flash_attn_varlen_qkvpacked_func"
    q, k, v = _unpack(fn, "qkv", qkv, 3, 1)
    cu_seqlens, max_seqlen = _args.tensor(fn, "cu_seqlens", cu_seqlens), _args.integer(fn, "max_seqlen", max_seqlen)
    return _varlen(fn, q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
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


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0, return_softmax_lse=False, *,
                            mapping: str = "auto", num_xcds: int = -1):
    """flash_attn.flash_attn_with_kvcache: attention of q (B, N_q, H_q, D) to a KV cache, after
    appending k/v (B, N_new, H_kv, D) into it in place at cache_seqlens.

    k_cache/v_cache: (B_cache, N_cache, H_kv, D), sequence b in entry cache_batch_idx[b] (default b);
    or, with block_table (B, max_pages) int32, pages (num_pages, page_size, H_kv, D) with page_size a
    power of two up to 256, key j of sequence b at block_table[b, j // page_size]. cache_seqlens: int
    or int32 (B,), the keys each cache holds before the append (default: all of them); the sequence
    then attends to keys cache_leftpad[b] (default 0) .. cache_seqlens[b] + N_new - 1, with causal and
    window_size aligned to the bottom-right as in flash_attn_func. rotary_cos/rotary_sin
    (seqlen_ro, rotary_dim / 2), q's dtype, with k and v: the new keys are rotated at their positions,
    q at cache_seqlens + i when causal or windowed, else at cache_seqlens; rotary_interleaved pairs
    dimensions (0, 1), (2, 3), ... (else GPT-NeoX's halves). num_splits: key splits a sequence's
    cache is read in on the GPU (0: chosen from the grid and the device). Returns out (B, N_q, H_q, D),
    and softmax_lse (B, H_q, N_q) float32 (float64 for float64 inputs) when return_softmax_lse.
    No gradient: a decoding step.
    """
    fn = "flash_attn_with_kvcache"
    q, k_cache, v_cache = (_args.tensor(fn, name, t) for name, t in (("q", q), ("k_cache", k_cache),
                                                                      ("v_cache", v_cache)))
    if cache_seqlens is not None and not isinstance(cache_seqlens, torch.Tensor):
        cache_seqlens = torch.full((q.shape[0],), _args.integer(fn, "cache_seqlens", cache_seqlens),
                                   dtype=torch.int32, device=q.device)
    left, right = _args.window(fn, window_size)
    tensors = {name: _args.optional_tensor(fn, name, t) for name, t in (
        ("k", k), ("v", v), ("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin), ("cache_seqlens", cache_seqlens),
        ("cache_batch_idx", cache_batch_idx), ("cache_leftpad", cache_leftpad), ("block_table", block_table),
        ("alibi_slopes", alibi_slopes))}
    out, lse = torch.ops.chiplet_fa.fwd_kvcache(
        q, k_cache, v_cache, **tensors, softmax_scale=_args.optional_real(fn, "softmax_scale", softmax_scale),
        causal=bool(causal), window_left=left, window_right=right, softcap=_args.softcap(fn, softcap),
        rotary_interleaved=bool(rotary_interleaved), num_splits=_args.integer(fn, "num_splits", num_splits),
        mapping=_args.mapping(fn, mapping), num_xcds=_args.integer(fn, "num_xcds", num_xcds))
    return (out, lse) if return_softmax_lse else out
