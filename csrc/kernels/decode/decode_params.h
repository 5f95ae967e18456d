// Everything the KV-cache decoding kernels need, as raw pointers and element strides
// (flash-attention's flash_attn_with_kvcache layouts):
//   q/out (B, N_q, H_q, D); softmax_lse (B, H_q, N_q); new keys/values k/v (B, N_new, H_kv, D);
//   a contiguous cache (B_cache, N_cache, H_kv, D), batch entry b at cache_batch_idx[b] (or b);
//   a paged cache (num_pages, page_size, H_kv, D), key j of sequence b on page
//   block_table[b][j / page_size] at row j % page_size.
// Sequence b attends to cache keys [cache_leftpad[b], cache_seqlens[b] + N_new) after the new keys
// are written at cache_seqlens[b] onwards; its query token i sits on the diagonal key
// i + end - N_q (bottom-right aligned, in absolute cache positions), which the masks and ALiBi use
// as the forward does (kernels/fwd_params.h).
#pragma once
#include <cstdint>

#include "arch/dtype.h"
#include "mapping/mapping.h"

namespace chiplet_fa {

// The keys sequence b attends to, [begin, end), and where its cache lives.
struct CacheSpan {
  int32_t begin, end;
  int32_t slot;  // the cache's batch entry (contiguous caches)
};

struct DecodeParams {
  const void* q;  // rotated into q_rotated first when rotary_dim > 0
  void* q_rotated;  // dense, as q then is
  void* k_cache;
  void* v_cache;
  const void* k_new;  // nullptr: nothing to append
  const void* v_new;
  const void* rotary_cos;  // (seqlen_ro, rotary_dim / 2), q's dtype
  const void* rotary_sin;
  void* out;
  float* softmax_lse;
  float* out_accum;  // num_splits > 1: (num_splits, B, H_q, N_q, D) partial outputs, normalised
  float* lse_accum;  // and their (num_splits, B, H_q, N_q) log-sum-exps

  const int32_t* cache_seqlens;    // nullptr: every sequence fills its cache (nothing appended)
  const int32_t* cache_batch_idx;  // nullptr: b
  const int32_t* cache_leftpad;    // nullptr: 0
  const int32_t* block_table;      // nullptr: a contiguous cache

  int64_t q_batch_stride, q_row_stride, q_head_stride;
  int64_t o_batch_stride, o_row_stride, o_head_stride;
  int64_t knew_batch_stride, knew_row_stride, knew_head_stride;
  int64_t vnew_batch_stride, vnew_row_stride, vnew_head_stride;
  int64_t k_batch_stride, k_row_stride, k_head_stride;  // batch: per cache entry or per page
  int64_t v_batch_stride, v_row_stride, v_head_stride;
  int64_t block_table_stride;

  int32_t batch, seqlen_q, seqlen_new, num_q_heads, num_kv_heads, head_dim;
  int32_t cache_entries;  // B_cache, or num_pages
  int32_t cache_rows;     // N_cache, or page_size
  int32_t page_shift;     // log2(page_size) of a paged cache
  int32_t pages_per_seq;  // block_table's columns

  int32_t rotary_dim, seqlen_ro;  // rotary_dim 0: none
  bool rotary_interleaved;        // pairs (2i, 2i + 1), else (i, i + rotary_dim / 2)
  bool rotary_q_per_token;        // token i of q at position cache_seqlens + i (causal or windowed), else all at cache_seqlens

  double softmax_scale;
  bool windowed;
  int32_t window_left, window_right;  // large where unbounded
  float softcap;
  const float* alibi_slopes;  // slope of (b, h) at b * alibi_batch_stride + h
  int64_t alibi_batch_stride;

  // Rows of one workgroup's tile are (token, query head) pairs of one KV head's group:
  // row r = token (r / heads_per_tile), head group_start + r % heads_per_tile.
  int32_t heads_per_tile;  // the GQA group, or 1 with ALiBi (a slope per head)
  int32_t block_m;
  int32_t num_splits;
  Mapping mapping;
  int32_t num_xcds;

  CFA_HOST_DEVICE bool paged() const { return block_table != nullptr; }
  CFA_HOST_DEVICE int32_t capacity() const { return paged() ? pages_per_seq << page_shift : cache_rows; }
  CFA_HOST_DEVICE int32_t head_groups() const { return num_q_heads / heads_per_tile; }
  CFA_HOST_DEVICE int32_t tile_rows() const { return seqlen_q * heads_per_tile; }
  CFA_HOST_DEVICE int32_t row_blocks() const { return (tile_rows() + block_m - 1) / block_m; }
  // A (sequence, head group)'s splits of its keys stack behind its row blocks in the m-block
  // dimension, so the mapping keeps them in the group's L2 domain.
  CFA_HOST_DEVICE GridShape grid_shape() const {
    return GridShape{batch, head_groups(), row_blocks() * num_splits, num_xcds, nullptr, 0};
  }

  CFA_HOST_DEVICE CacheSpan span(int32_t b) const {
    const int32_t len = cache_seqlens ? cache_seqlens[b] + seqlen_new : capacity();
    return CacheSpan{cache_leftpad ? cache_leftpad[b] : 0, len, cache_batch_idx ? cache_batch_idx[b] : b};
  }
  // Key `key` of sequence b (span s) in a cache with the given strides, at KV head h.
  template <typename T>
  CFA_HOST_DEVICE T* cache_row(T* cache, int64_t entry_stride, int64_t row_stride, int64_t head_stride, int32_t b,
                               const CacheSpan& s, int32_t key, int32_t h) const {
    if (paged()) {
      const int32_t page = block_table[b * block_table_stride + (key >> page_shift)];
      return cache + page * entry_stride + (key & ((1 << page_shift) - 1)) * row_stride + h * head_stride;
    }
    return cache + s.slot * entry_stride + key * row_stride + h * head_stride;
  }
  CFA_HOST_DEVICE float alibi_slope(int32_t b, int32_t q_head) const {
    return alibi_slopes ? alibi_slopes[b * alibi_batch_stride + q_head] : 0.f;
  }
};

}  // namespace chiplet_fa
