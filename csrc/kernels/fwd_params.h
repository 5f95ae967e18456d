// Everything a forward kernel needs, as raw pointers and element strides, so kernels stay
// free of any framework type. Layouts follow flash-attention: q/out (B, N_q, H_q, D),
// k/v (B, N_k, H_kv, D), softmax_lse (B, H_q, N_q) contiguous float32.
#pragma once
#include <cstdint>

#include "arch/dtype.h"
#include "mapping/mapping.h"

namespace chiplet_fa {

struct FwdParams {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  float* softmax_lse;

  int64_t q_batch_stride, q_row_stride, q_head_stride;
  int64_t k_batch_stride, k_row_stride, k_head_stride;
  int64_t v_batch_stride, v_row_stride, v_head_stride;
  int64_t o_batch_stride, o_row_stride, o_head_stride;

  int32_t batch, seqlen_q, seqlen_k, num_q_heads, num_kv_heads, head_dim;
  double softmax_scale;  // kernels round it to their accumulator type
  bool causal;

  Mapping mapping;
  int32_t num_xcds;
  int32_t block_m;  // rows per tile of the backend that runs: fixes num_m_blocks

  CFA_HOST_DEVICE int32_t num_m_blocks() const { return (seqlen_q + block_m - 1) / block_m; }
  CFA_HOST_DEVICE GridShape grid_shape() const { return GridShape{batch, num_q_heads, num_m_blocks(), num_xcds}; }
  // Bottom-right causal alignment: query row i sees keys j <= i + causal_offset().
  CFA_HOST_DEVICE int32_t causal_offset() const { return seqlen_k - seqlen_q; }

  // Where one (batch, query head)'s slabs start, as element type T; GQA picks the KV head by
  // index. Rows are then row_stride apart.
  template <typename T>
  struct HeadSlabs {
    const T* q;
    const T* k;
    const T* v;
    T* out;
    float* lse;
  };
  template <typename T>
  CFA_HOST_DEVICE HeadSlabs<T> head_slabs(int32_t b, int32_t q_head) const {
    const int32_t kv_head = q_head / (num_q_heads / num_kv_heads);
    return {static_cast<const T*>(q) + b * q_batch_stride + q_head * q_head_stride,
            static_cast<const T*>(k) + b * k_batch_stride + kv_head * k_head_stride,
            static_cast<const T*>(v) + b * v_batch_stride + kv_head * v_head_stride,
            static_cast<T*>(out) + b * o_batch_stride + q_head * o_head_stride,
            softmax_lse + (int64_t(b) * num_q_heads + q_head) * seqlen_q};
  }
  // One past the last key that query rows below row_end can see (keys past it are never loaded).
  CFA_HOST_DEVICE int32_t key_end(int32_t row_end) const {
    const int32_t limit = row_end + causal_offset();
    return causal && limit < seqlen_k ? (limit > 0 ? limit : 0) : seqlen_k;
  }
};

}  // namespace chiplet_fa
