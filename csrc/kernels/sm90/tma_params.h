// The sm90 kernels' parameters: their params with TMA descriptions of the tensors the copy
// engine moves, as (head_dim, rows, heads, batch) tensors. A dense batch's rows are one
// sequence's, so the copy engine zero-fills (loads) or drops (reductions) rows past its end; a
// packed batch is one (head_dim, total, heads) tensor, where rows past a sequence's end belong to
// the next sequence (the forward copies the last key block of a packed sequence itself,
// zero-filled; the backward's consumers stage a dQ share of exactly zero for those rows).
#pragma once
#include <algorithm>

#include "arch/sm90_tma.h"
#include "kernels/bwd_params.h"
#include "kernels/fwd_params.h"
#include "kernels/trace.h"

namespace chiplet_fa::CFA_FAMILY {

// The trace sink last, so that a default build's parameters keep their offsets.
struct TmaFwdParams {
  FwdParams p;
  CUtensorMap q, k, v;
  TraceSink trace;
};
// q and dout, which the producer loads a query block of at a time, and dq: the fp32 (or fixed-point int32) dQ accumulator
// (laid out like q, BwdParams), which a consumer adds its dQ share of a query block into;
// undescribed where the pass computes no dQ (deterministic mode).
struct TmaBwdParams {
  BwdParams p;
  CUtensorMap q, dout, dq;
  TraceSink trace;
};

// One of the call's tensors (q, k, v, dout, dq_accum) for the copy engine: strides of dims of one
// entry, which nothing steps over, get the tensor's extent (any multiple of 16 is valid there).
inline arch::TensorDesc tma_desc(const void* base, arch::TmaElement element, int64_t head_dim, int64_t rows,
                                 int64_t heads, int64_t batch, int64_t row_stride, int64_t head_stride,
                                 int64_t batch_stride, int box_rows) {
  const int64_t bytes = arch::element_bytes(element);
  const int64_t extent = std::max(rows * row_stride, heads * head_stride) * bytes;
  return arch::TensorDesc{base,
                          element,
                          {uint64_t(head_dim), uint64_t(rows), uint64_t(heads), uint64_t(batch)},
                          {uint64_t(row_stride * bytes), uint64_t(heads > 1 ? head_stride * bytes : extent),
                           uint64_t(batch > 1 ? batch_stride * bytes : extent)},
                          uint32_t(box_rows)};
}

constexpr arch::TmaElement element(bool bf16) { return bf16 ? arch::TmaElement::kBFloat16 : arch::TmaElement::kFloat16; }

// One of the call's tensors of query rows (q, dout, dq_accum): (head_dim, rows, query heads, batch).
inline CUtensorMap query_rows_map(const FwdParams& p, const void* base, arch::TmaElement e, int64_t row_stride,
                                  int64_t head_stride, int64_t batch_stride, int box_rows, const char* name) {
  const bool packed = p.cu_seqlens_q != nullptr;
  return arch::make_tensor_map(tma_desc(base, e, p.head_dim, packed ? p.total_q : p.seqlen_q, p.num_q_heads,
                                        packed ? 1 : p.batch, row_stride, head_stride, batch_stride, box_rows),
                               name);
}

inline TmaFwdParams with_tensor_maps(const FwdParams& p, bool bf16, int q_box_rows, int kv_box_rows) {
  const bool packed = p.cu_seqlens_q != nullptr;
  const int64_t rows_k = packed ? p.total_k : p.seqlen_k, batch = packed ? 1 : p.batch;
  const arch::TmaElement e = element(bf16);
  return TmaFwdParams{
      p,
      query_rows_map(p, p.q, e, p.q_row_stride, p.q_head_stride, p.q_batch_stride, q_box_rows, "q"),
      arch::make_tensor_map(tma_desc(p.k, e, p.head_dim, rows_k, p.num_kv_heads, batch, p.k_row_stride,
                                     p.k_head_stride, p.k_batch_stride, kv_box_rows),
                            "k"),
      arch::make_tensor_map(tma_desc(p.v, e, p.head_dim, rows_k, p.num_kv_heads, batch, p.v_row_stride,
                                     p.v_head_stride, p.v_batch_stride, kv_box_rows),
                            "v")};
}

// A packed batch's query rows past a sequence's end are the next sequence's: the producer copies
// that last query block by hand, zero-filled, and the consumers stage a dQ share of exactly zero
// for those rows (by a select: 0 * inf in dS), so the reduction needs no per-sequence bound.
inline TmaBwdParams with_tensor_maps(const BwdParams& p, bool bf16, bool atomic_dq, int box_rows) {
  const arch::TmaElement e = element(bf16);
  TmaBwdParams a{p,
                 query_rows_map(p, p.q, e, p.q_row_stride, p.q_head_stride, p.q_batch_stride, box_rows, "q"),
                 query_rows_map(p, p.dout, e, p.do_row_stride, p.do_head_stride, p.do_batch_stride, box_rows, "dout"),
                 {}};
  const int64_t d = p.head_dim, h = p.num_q_heads;
  const arch::TmaElement acc = p.dq_scale ? arch::TmaElement::kInt32 : arch::TmaElement::kFloat32;  // fixed point
  if (atomic_dq)
    a.dq = query_rows_map(p, p.dq_accum, acc, h * d, d, int64_t(p.seqlen_q) * h * d, box_rows, "dq_accum");
  return a;
}

}  // namespace chiplet_fa::CFA_FAMILY
