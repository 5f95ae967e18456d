// The step before a decoding launch reads the cache: one workgroup per sequence checks the
// values only the device holds (cache_seqlens, cache_leftpad, cache_batch_idx, the block table's
// pages in use) and stops the device on one that would send a read or write outside the cache;
// then it appends the new keys and values at cache_seqlens (rotary applied to the keys) and
// writes the rotated queries. Elementwise: a few rows per sequence, bandwidth negligible next to
// the cache.
#pragma once
#include "arch/arch.h"
#include "kernels/decode/decode_params.h"

namespace chiplet_fa::CFA_FAMILY {

constexpr int kPrepareThreads = 128;

// The rotary embedding of element d of row x at position pos (flash-attention's: interleaved pairs
// (2i, 2i + 1), else (i, i + rotary_dim / 2)); elements past rotary_dim pass through.
template <typename T>
CFA_DEVICE float rotated(const DecodeParams& p, const T* x, int d, int pos) {
  const float v = float(x[d]);
  if (d >= p.rotary_dim) return v;
  const int half = p.rotary_dim / 2;
  const int i = p.rotary_interleaved ? d / 2 : d % half;
  const bool first = p.rotary_interleaved ? d % 2 == 0 : d < half;
  const float other = float(x[p.rotary_interleaved ? (first ? d + 1 : d - 1) : (first ? d + half : d - half)]);
  const float c = float(static_cast<const T*>(p.rotary_cos)[int64_t(pos) * half + i]);
  const float s = float(static_cast<const T*>(p.rotary_sin)[int64_t(pos) * half + i]);
  return first ? v * c - other * s : v * c + other * s;
}

// Whether sequence b's values keep every access inside the cache; threads share the page checks.
CFA_DEVICE bool span_is_safe(const DecodeParams& p, int32_t b, const CacheSpan& s, int tid) {
  const int32_t cached = p.cache_seqlens ? p.cache_seqlens[b] : p.capacity();
  bool ok = cached >= 0 && cached <= p.capacity() - p.seqlen_new && s.begin >= 0 && s.begin <= cached &&
            s.slot >= 0 && s.slot < p.cache_entries;
  if (p.paged() && ok) {
    const int32_t pages = (s.end + (1 << p.page_shift) - 1) >> p.page_shift;
    for (int32_t i = tid; i < pages; i += kPrepareThreads) {
      const int32_t page = p.block_table[b * p.block_table_stride + i];
      ok &= page >= 0 && page < p.cache_entries;
    }
  }
  return ok;
}

template <typename T>
CFA_DEVICE void append_new_keys(const DecodeParams& p, int32_t b, const CacheSpan& s, int tid) {
  const int32_t first = s.end - p.seqlen_new;
  const int64_t items = int64_t(p.seqlen_new) * p.num_kv_heads * p.head_dim;
  for (int64_t e = tid; e < items; e += kPrepareThreads) {
    const int d = int(e % p.head_dim);
    const int32_t h = int32_t(e / p.head_dim % p.num_kv_heads), j = int32_t(e / p.head_dim / p.num_kv_heads);
    const int32_t key = first + j;
    const T* k = static_cast<const T*>(p.k_new) + b * p.knew_batch_stride + j * p.knew_row_stride + h * p.knew_head_stride;
    const T* v = static_cast<const T*>(p.v_new) + b * p.vnew_batch_stride + j * p.vnew_row_stride + h * p.vnew_head_stride;
    p.cache_row(static_cast<T*>(p.k_cache), p.k_batch_stride, p.k_row_stride, p.k_head_stride, b, s, key, h)[d] =
        T(rotated(p, k, d, key));
    p.cache_row(static_cast<T*>(p.v_cache), p.v_batch_stride, p.v_row_stride, p.v_head_stride, b, s, key, h)[d] = v[d];
  }
}

// q_rotated is dense (B, N_q, H_q, D).
template <typename T>
CFA_DEVICE void rotate_queries(const DecodeParams& p, int32_t b, int tid) {
  const int32_t cached = p.cache_seqlens[b];
  const int64_t items = int64_t(p.seqlen_q) * p.num_q_heads * p.head_dim;
  T* out = static_cast<T*>(p.q_rotated) + b * items;
  for (int64_t e = tid; e < items; e += kPrepareThreads) {
    const int d = int(e % p.head_dim);
    const int32_t h = int32_t(e / p.head_dim % p.num_q_heads), i = int32_t(e / p.head_dim / p.num_q_heads);
    const T* q = static_cast<const T*>(p.q) + b * p.q_batch_stride + i * p.q_row_stride + h * p.q_head_stride;
    out[e] = T(rotated(p, q, d, cached + (p.rotary_q_per_token ? i : 0)));
  }
}

// One workgroup per sequence, kPrepareThreads threads, 4 bytes of shared memory.
template <typename T>
CFA_GLOBAL void __launch_bounds__(kPrepareThreads) decode_prepare_kernel(const DecodeParams p) {
  const int32_t b = blockIdx.x;
  const CacheSpan s = p.span(b);
  int* unsafe = reinterpret_cast<int*>(dynamic_smem());
  if (threadIdx.x == 0) *unsafe = 0;
  arch::block_sync();
  if (!span_is_safe(p, b, s, threadIdx.x)) *unsafe = 1;
  arch::block_sync();
  if (*unsafe) {
    if (threadIdx.x == 0)
      device_fail("cache_seqlens, cache_leftpad, cache_batch_idx or block_table point outside the KV cache");
    return;
  }
  if (p.rotary_dim > 0 && p.cache_seqlens[b] + max(p.seqlen_new - 1, p.rotary_q_per_token ? p.seqlen_q - 1 : 0) >=
                              p.seqlen_ro) {
    if (threadIdx.x == 0) device_fail("rotary_cos/rotary_sin have fewer rows than the positions to rotate");
    return;
  }
  if (p.k_new) append_new_keys<T>(p, b, s, threadIdx.x);
  if (p.rotary_dim > 0) rotate_queries<T>(p, b, threadIdx.x);
}

}  // namespace chiplet_fa::CFA_FAMILY
