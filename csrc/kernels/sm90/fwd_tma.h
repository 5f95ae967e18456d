// The sm90 forward's kernel parameter: FwdParams with TMA descriptions of q, k and v, as
// (head_dim, rows, heads, batch) tensors: a dense batch's rows are one sequence's, so rows past
// its end are zero-filled by the copy engine; a packed batch is one (head_dim, total, heads)
// tensor, where rows past a sequence's end belong to the next sequence (the kernel copies the
// last key block of a packed sequence itself, zero-filled).
#pragma once
#include <algorithm>

#include "arch/sm90_tma.h"
#include "kernels/fwd_params.h"

namespace chiplet_fa::CFA_FAMILY {

struct TmaFwdParams {
  FwdParams p;
  CUtensorMap q, k, v;
};

// One of q, k, v in 16-byte units for the copy engine: strides of dims of one entry, which nothing
// steps over, get the tensor's extent (any multiple of 16 is valid there).
inline arch::TensorDesc tma_desc(const void* base, int64_t head_dim, int64_t rows, int64_t heads, int64_t batch,
                                 int64_t row_stride, int64_t head_stride, int64_t batch_stride, int box_rows) {
  constexpr int64_t kBytes = 2;
  const int64_t extent = std::max(rows * row_stride, heads * head_stride) * kBytes;
  return arch::TensorDesc{base,
                          {uint64_t(head_dim), uint64_t(rows), uint64_t(heads), uint64_t(batch)},
                          {uint64_t(row_stride * kBytes), uint64_t(heads > 1 ? head_stride * kBytes : extent),
                           uint64_t(batch > 1 ? batch_stride * kBytes : extent)},
                          uint32_t(box_rows)};
}

inline TmaFwdParams with_tensor_maps(const FwdParams& p, bool bf16, int q_box_rows, int kv_box_rows) {
  const bool packed = p.cu_seqlens_q != nullptr;
  const int64_t rows_q = packed ? p.total_q : p.seqlen_q, rows_k = packed ? p.total_k : p.seqlen_k;
  const int64_t batch = packed ? 1 : p.batch;
  return TmaFwdParams{
      p,
      arch::make_tensor_map(tma_desc(p.q, p.head_dim, rows_q, p.num_q_heads, batch, p.q_row_stride, p.q_head_stride,
                                     p.q_batch_stride, q_box_rows),
                            bf16, "q"),
      arch::make_tensor_map(tma_desc(p.k, p.head_dim, rows_k, p.num_kv_heads, batch, p.k_row_stride,
                                     p.k_head_stride, p.k_batch_stride, kv_box_rows),
                            bf16, "k"),
      arch::make_tensor_map(tma_desc(p.v, p.head_dim, rows_k, p.num_kv_heads, batch, p.v_row_stride,
                                     p.v_head_stride, p.v_batch_stride, kv_box_rows),
                            bf16, "v")};
}

}  // namespace chiplet_fa::CFA_FAMILY
