"""Fake (meta) kernels so torch.compile traces the operators without running them.

They also serve meta tensors and mixed-device calls (a meta tensor outranks CPU in dispatch), so
they check what the C++ front end (csrc/ops/attention_checks.cpp) checks that shapes alone can
decide, with the same messages.
"""
import math

import torch

from . import _C

_LIB = "chiplet_fa"
_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_MAX_LENGTH = 1 << 29


def _lse_dtype(q):
    """softmax_lse's dtype (csrc/ops/fwd_api.h lse_dtype): float64 for float64 inputs, else float32."""
    return torch.float64 if q.dtype == torch.float64 else torch.float32


def _last_dim_ok(t):
    """Stride 1 in the last dimension, or no stride to respect: a last dimension of size <= 1 or
    an empty tensor (torch calls those contiguous whatever the stride)."""
    return t.numel() == 0 or t.shape[-1] <= 1 or t.stride(-1) == 1


def _check_qkv(op, q, k, v, packed):
    rank, layout = (3, "(total_tokens, num_heads, head_dim)") if packed else (4, "(batch, seqlen, num_heads, head_dim)")
    for name, t in (("q", q), ("k", k), ("v", v)):
        torch._check_value(t.dim() == rank, lambda: f"{op}: {name} must be {rank}-D {layout}, got {t.dim()}-D")
        torch._check_value(t.dtype == q.dtype, lambda: f"{op}: {name} has dtype "
                           f"{t.dtype} but q has {q.dtype}; q, k and v must share one dtype")
        torch._check_value(t.device == q.device, lambda: f"{op}: {name} is on "
                           f"{t.device} but q is on {q.device}; q, k and v must be on one device")
        torch._check_value(_last_dim_ok(t), lambda: f"{op}: {name} "
                           "must have a contiguous last dimension (stride(-1) == 1), got stride "
                           f"{t.stride(-1)}; call .contiguous() first")
    torch._check_value(q.dtype in _DTYPES, lambda: f"{op}: q must be float16, bfloat16, "
                       f"float32 or float64, got {q.dtype}")
    if not packed:
        batch = q.shape[0]
        torch._check_value(k.shape[0] == batch and v.shape[0] == batch, lambda: f"{op}: k "
                           f"and v must have batch {batch} like q, got {k.shape[0]} and {v.shape[0]}")
    torch._check_value(v.shape[:-1] == k.shape[:-1], lambda: f"{op}: v must have shape "
                       f"{tuple(k.shape[:-1]) + ('D',)} like k, got {tuple(v.shape)}")
    num_heads, head_dim = q.shape[-2], q.shape[-1]
    torch._check_value(k.shape[-1] == head_dim and v.shape[-1] == head_dim,
                       lambda: f"{op}: head dims differ: q has {head_dim}, "
                       f"k has {k.shape[-1]}, v has {v.shape[-1]}")
    torch._check_value(1 <= head_dim <= 256, lambda: f"{op}: head_dim must be in 1..256, got {head_dim}")
    torch._check_value(k.shape[-2] >= 1 and num_heads % k.shape[-2] == 0,
                       lambda: f"{op}: num_heads of q ({num_heads}) must be a positive "
                       f"multiple of num_heads of k/v ({k.shape[-2]})")


def _check_options(op, q, batch, softmax_scale, mapping, num_xcds, window_left, window_right,
                   softcap, alibi_slopes):
    torch._check_value(num_xcds == -1 or num_xcds >= 1, lambda: f"{op}: num_xcds must be "
                       f"-1 (detect) or >= 1, got {num_xcds}")
    torch._check_value(mapping == "auto" or mapping in _C.mapping_names,
                       lambda: "mapping must be one of 'auto', "
                       + ", ".join(f"'{m}'" for m in _C.mapping_names) + f"; got '{mapping}'")
    torch._check_value(softmax_scale is None or math.isfinite(softmax_scale),
                       lambda: f"{op}: softmax_scale must be finite, got {softmax_scale}")
    torch._check_value(window_left >= -1 and window_right >= -1, lambda: f"{op}: window_size entries "
                       f"must be >= -1 (-1: unbounded), got ({window_left}, {window_right})")
    torch._check_value(math.isfinite(softcap) and softcap >= 0,
                       lambda: f"{op}: softcap must be finite and >= 0 (0: none), got {softcap}")
    if alibi_slopes is not None:
        heads = q.shape[-2]
        torch._check_value(alibi_slopes.dtype == torch.float32,
                           lambda: f"{op}: alibi_slopes must be float32, got {alibi_slopes.dtype}")
        torch._check_value(tuple(alibi_slopes.shape) in ((heads,), (batch, heads)),
                           lambda: f"{op}: alibi_slopes must have shape ({heads},) or ({batch}, {heads}), "
                           f"got {tuple(alibi_slopes.shape)}")
        torch._check_value(alibi_slopes.device == q.device, lambda: f"{op}: alibi_slopes is on "
                           f"{alibi_slopes.device} but q is on {q.device}")


def _check_cu_seqlens(op, q, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k):
    for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        torch._check_value(cu.dtype == torch.int32 and cu.dim() == 1,
                           lambda: f"{op}: {name} must be a 1-D int32 tensor, got {cu.dim()}-D {cu.dtype}")
        torch._check_value(cu.shape[0] == cu_seqlens_q.shape[0], lambda: f"{op}: {name} must have batch + 1 = "
                           f"{cu_seqlens_q.shape[0]} entries like cu_seqlens_q, got {cu.shape[0]}")
        torch._check_value(cu.device == q.device, lambda: f"{op}: {name} is on {cu.device} but q is on {q.device}")
    for name, n in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        torch._check_value(0 <= n < _MAX_LENGTH, lambda: f"{op}: {name} must be in 0..2^29, got {n}")
    torch._check_value(cu_seqlens_q.shape[0] >= 1, lambda: f"{op}: cu_seqlens_q must have batch + 1 >= 1 entries")
    return cu_seqlens_q.shape[0] - 1


@torch.library.register_fake(f"{_LIB}::fwd")
def _fwd_fake(q, k, v, softmax_scale=None, causal=False, mapping="auto", num_xcds=-1, window_left=-1,
              window_right=-1, softcap=0.0, alibi_slopes=None, deterministic=False):
    op = "chiplet_fa.fwd"
    _check_qkv(op, q, k, v, packed=False)
    _check_options(op, q, q.shape[0], softmax_scale, mapping, num_xcds, window_left, window_right, softcap,
                   alibi_slopes)
    batch, seqlen_q, num_heads, _ = q.shape
    return q.new_empty(q.shape), q.new_empty((batch, num_heads, seqlen_q), dtype=_lse_dtype(q))


def _fwd_varlen_fake_checked(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                             window_left, window_right, softcap, alibi_slopes, mapping, num_xcds):
    op = "chiplet_fa.fwd_varlen"
    _check_qkv(op, q, k, v, packed=True)
    batch = _check_cu_seqlens(op, q, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    _check_options(op, q, batch, softmax_scale, mapping, num_xcds, window_left, window_right, softcap, alibi_slopes)
    return q.new_empty((q.shape[1], q.shape[0]), dtype=_lse_dtype(q))


@torch.library.register_fake(f"{_LIB}::fwd_varlen")
def _fwd_varlen_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale=None,
                     causal=False, window_left=-1, window_right=-1, softcap=0.0, alibi_slopes=None,
                     mapping="auto", num_xcds=-1, deterministic=False):
    lse = _fwd_varlen_fake_checked(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                                   window_left, window_right, softcap, alibi_slopes, mapping, num_xcds)
    return q.new_empty(q.shape), lse


@torch.library.register_fake(f"{_LIB}::fwd_varlen.out")
def _fwd_varlen_out_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale=None,
                         causal=False, window_left=-1, window_right=-1, softcap=0.0, alibi_slopes=None,
                         mapping="auto", num_xcds=-1, deterministic=False, *, out):
    lse = _fwd_varlen_fake_checked(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale,
                                   window_left, window_right, softcap, alibi_slopes, mapping, num_xcds)
    torch._check_value(out.shape == q.shape and out.dtype == q.dtype and out.device == q.device,
                       lambda: f"chiplet_fa.fwd_varlen: out must have the shape, dtype and device of q "
                       f"{tuple(q.shape)} {q.dtype} {q.device}, got {tuple(out.shape)} {out.dtype} {out.device}")
    return lse


def _grads_fake(op, dout, q, k, v, out):
    torch._check_value(dout.shape == q.shape and out.shape == q.shape,
                       lambda: f"{op}: dout and out must have the shape of q {tuple(q.shape)}")
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


@torch.library.register_fake(f"{_LIB}::bwd")
def _bwd_fake(dout, q, k, v, out, softmax_lse, softmax_scale=None, causal=False, mapping="auto",
              num_xcds=-1, deterministic=False, window_left=-1, window_right=-1, softcap=0.0, alibi_slopes=None):
    return _grads_fake("chiplet_fa.bwd", dout, q, k, v, out)


@torch.library.register_fake(f"{_LIB}::bwd_varlen")
def _bwd_varlen_fake(dout, q, k, v, out, softmax_lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                     softmax_scale=None, causal=False, window_left=-1, window_right=-1, softcap=0.0,
                     alibi_slopes=None, mapping="auto", num_xcds=-1, deterministic=False):
    return _grads_fake("chiplet_fa.bwd_varlen", dout, q, k, v, out)


@torch.library.register_fake(f"{_LIB}::fwd_kvcache")
def _fwd_kvcache_fake(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None, cache_seqlens=None,
                      cache_batch_idx=None, cache_leftpad=None, block_table=None, softmax_scale=None, causal=False,
                      window_left=-1, window_right=-1, softcap=0.0, alibi_slopes=None, rotary_interleaved=True,
                      num_splits=0, mapping="auto", num_xcds=-1):
    op = "chiplet_fa.fwd_kvcache"
    torch._check_value(q.dim() == 4, lambda: f"{op}: q must be 4-D, got {q.dim()}-D")
    torch._check_value(q.dtype in _DTYPES, lambda: f"{op}: q must be float16, bfloat16, float32 or float64, "
                       f"got {q.dtype}")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        torch._check_value(t.dim() == 4, lambda: f"{op}: {name} must be 4-D, got {t.dim()}-D")
        torch._check_value(t.dtype == q.dtype, lambda: f"{op}: {name} has dtype {t.dtype} but q has {q.dtype}")
        torch._check_value(t.device == q.device, lambda: f"{op}: {name} is on {t.device} but q is on {q.device}")
    torch._check_value(v_cache.shape == k_cache.shape, lambda: f"{op}: v_cache must have k_cache's shape "
                       f"{tuple(k_cache.shape)}, got {tuple(v_cache.shape)}")
    torch._check_value(k_cache.shape[3] == q.shape[3], lambda: f"{op}: k_cache has head_dim {k_cache.shape[3]} "
                       f"but q has {q.shape[3]}")
    torch._check_value(k_cache.shape[2] >= 1 and q.shape[2] % k_cache.shape[2] == 0,
                       lambda: f"{op}: num_heads of q ({q.shape[2]}) must be a positive multiple of num_heads of "
                       f"k_cache ({k_cache.shape[2]})")
    torch._check_value(0 <= num_splits <= 256, lambda: f"{op}: num_splits must be in 0..256 (0: chosen by a "
                       f"heuristic), got {num_splits}")
    batch, seqlen_q, num_heads, _ = q.shape
    _check_options(op, q, batch, softmax_scale, mapping, num_xcds, window_left, window_right, softcap, alibi_slopes)
    return q.new_empty(q.shape), q.new_empty((batch, num_heads, seqlen_q), dtype=_lse_dtype(q))
