// Everything a backward kernel needs, as raw pointers and element strides. It extends the
// forward's params (q, k, v, out, softmax_lse, the problem shape, sequences and masks) with the
// gradients.
//
// Layouts: dout like q; dk/dv like k; dq_accum like q (dense (B, N_q, H_q, D), packed (T_q, H_q, D))
// but contiguous in the accumulator type (float, double for fp64 inputs). softmax_d and the GPU's
// lse_log2 hold one value per query row, in rows padded to whole blocks of stats_pad per sequence
// (padding: D = 0, lse_log2 = +inf), so kernels read them per query block without bounds checks:
// dense (B, H_q, stats_rows); packed (H_q, stats_rows) with sequence b starting at row
// stats_pad * (cu_seqlens_q[b] / stats_pad + b).
//
// Grids. The main kernel is KV-block parallel: one workgroup owns block_n keys of one KV head
// and produces their dK/dV, looping over the G query heads of its group (no atomics for GQA), or
// (kv_split > 1) over G / kv_split of them, adding its partial dK/dV into fp32 accumulators (or,
// deterministic, writing them to a slice per split).
// Its workgroups go through map_workgroup with rows = (batch, kv_head, split) and blocks =
// n-blocks, GridShape{batch, num_kv_heads * kv_split, num_n_blocks, num_xcds, kv_block_offsets}:
// the ACC is the KV head (or its split), so the Q/dO/LSE/D it streams stay in one L2 domain. The
// deterministic dQ pass is query-block parallel and uses the forward's grid (FwdParams::grid_shape(),
// block_m rows).
//
// Deterministic dQ: sm90's main pass adds its shares in fixed point (dq_scale below), whose
// integer sums are the same in any order; the other families take the dQ pass.
#pragma once
#include <cstdint>

#include "kernels/fwd_params.h"
#include "mapping/mapping.h"

namespace chiplet_fa {

struct KvTile {
  int32_t batch;
  int32_t kv_head;
  int32_t n_block;
  int32_t split;  // which G / kv_split query heads of the group (0 without a split)
};

struct BwdParams : FwdParams {
  const void* dout;
  void* dk;
  void* dv;
  void* dq_accum;   // dQ in the accumulator type: atomics add into it, or the dQ pass writes it
  void* softmax_d;  // D = rowsum(dO * O), written by the preprocess
  // GPU: lse * log2(e), +inf where a row has no gradient (padding, or lse -inf: fully masked),
  // so P = 2^(s - lse_log2) is 0 there. Written by the preprocess.
  float* lse_log2;
  int32_t stats_pad;   // see the layouts above
  int64_t stats_rows;  // rows of softmax_d and lse_log2 per (batch, head) (dense) or per head (packed)

  int64_t do_batch_stride, do_row_stride, do_head_stride;
  int64_t dk_batch_stride, dk_row_stride, dk_head_stride;
  int64_t dv_batch_stride, dv_row_stride, dv_head_stride;

  int32_t block_n;            // keys per workgroup of the main kernel
  int32_t* kv_block_offsets;  // the main kernel's ragged grid (packed batches), like block_offsets
  bool deterministic;         // dQ reproducible: in fixed point (dq_scale) or by a separate query-block pass
  // Fixed-point dQ (deterministic mode, sm90): dq_accum holds int32 sums of each share times its
  // row's dq_scale (a power of two per (row, head), laid out as softmax_d, written by the
  // preprocess from a bound on the row's |dQ| and kv_absmax = {max |K|, max |V|}), which do not
  // depend on the order the reductions land in; then dq_out = dq_accum / dq_scale in the input
  // type. nullptr otherwise.
  float* dq_scale;
  const float* kv_absmax;
  void* dq_out;
  int32_t slice_col0;         // head dims split into column slices: the first column of dK, dV, dQ a launch writes
  // Workgroups a KV block's query heads are split over (sm90; kernel_binding.h says when): each
  // takes G / kv_split of them, and dk, dv are fp32 accumulators (zeroed) that each adds its
  // partial dK, dV into. 1: one workgroup per KV block, dk and dv in the input type.
  int32_t kv_split = 1;
  // Deterministic mode's split (fp32 sums in any order are not reproducible): split s writes its
  // partial dK, dV at dk, dv + s * kv_partial_stride elements, a slice each, which the binding sums
  // after the kernel. 0: the partials are added (atomic mode).
  int64_t kv_partial_stride = 0;

  CFA_HOST_DEVICE int32_t heads_per_kv_tile() const { return group_size() / kv_split; }
  // The bytes a row of the KV grid streams: Q and dO (elem_bytes an element) and the fp32 dQ of
  // its query heads.
  CFA_HOST_DEVICE int64_t kv_row_bytes(int elem_bytes) const {
    return int64_t(heads_per_kv_tile()) * seqlen_q * head_dim * (2 * elem_bytes + 4);
  }

  CFA_HOST_DEVICE int32_t num_n_blocks() const { return (seqlen_k + block_n - 1) / block_n; }
  // Under a causal mask key block n is seen by the queries from n on: the first blocks are the longest.
  CFA_HOST_DEVICE GridShape kv_grid_shape() const {
    return GridShape{batch, num_kv_heads * kv_split, num_n_blocks(), num_xcds,
                     kv_block_offsets, longest_first() ? section_rows : 0, true};
  }
  // One KV head's dK and dV slabs of sequence b, as element type T: the input type, or float where
  // dk and dv are a split group's accumulators (kv_split > 1).
  template <typename T>
  struct KeyGrads {
    T* dk;
    T* dv;
  };
  template <typename T>
  CFA_HOST_DEVICE KeyGrads<T> key_grads(int32_t b, int32_t kv_head, const Sequence& s) const {
    return {static_cast<T*>(dk) + b * dk_batch_stride + s.k_start * dk_row_stride + kv_head * dk_head_stride,
            static_cast<T*>(dv) + b * dv_batch_stride + s.k_start * dv_row_stride + kv_head * dv_head_stride};
  }
  // One KV head's K, V, dK and dV slabs of sequence b, as element type T (rows row_stride apart).
  template <typename T>
  struct KvSlabs {
    const T* k;
    const T* v;
    T* dk;
    T* dv;
  };
  template <typename T>
  CFA_HOST_DEVICE KvSlabs<T> kv_slabs(int32_t b, int32_t kv_head, const Sequence& s) const {
    const KeyGrads<T> g = key_grads<T>(b, kv_head, s);
    return {static_cast<const T*>(k) + b * k_batch_stride + s.k_start * k_row_stride + kv_head * k_head_stride,
            static_cast<const T*>(v) + b * v_batch_stride + s.k_start * v_row_stride + kv_head * v_head_stride,
            g.dk, g.dv};
  }
  // One query head's Q and dO slabs of sequence b and its rows of lse_log2 and D (GPU layout).
  template <typename T>
  struct QuerySlabs {
    const T* q;
    const T* dout;
    const float* lse_log2;
    const float* delta;
  };
  template <typename T>
  CFA_HOST_DEVICE QuerySlabs<T> query_slabs(int32_t b, int32_t h, const Sequence& s) const {
    const int64_t stats = stats_row(b, h, s);
    return {static_cast<const T*>(q) + b * q_batch_stride + s.q_start * q_row_stride + h * q_head_stride,
            static_cast<const T*>(dout) + b * do_batch_stride + s.q_start * do_row_stride + h * do_head_stride,
            lse_log2 + stats, static_cast<const float*>(softmax_d) + stats};
  }
  // First row of (sequence b, query head h) in softmax_d and lse_log2.
  CFA_HOST_DEVICE int64_t stats_row(int32_t b, int32_t h, const Sequence& s) const {
    if (!cu_seqlens_q) return (int64_t(b) * num_q_heads + h) * stats_rows;
    return h * stats_rows + stats_pad * (s.q_start / stats_pad + b);
  }
  // The rows of softmax_d's layout one query head has over the whole batch: dense, every
  // sequence's stats_rows; packed, stats_rows (sequence b's from packed_stats_start(b) on).
  CFA_HOST_DEVICE int64_t head_stats_rows() const { return cu_seqlens_q ? stats_rows : int64_t(batch) * stats_rows; }
  CFA_HOST_DEVICE int64_t packed_stats_start(int32_t b) const {
    return stats_pad * (int64_t(cu_seqlens_q[b]) / stats_pad + b);
  }
  // The 1-D grid of the per-row passes (the preprocess and the fixed-point dQ conversion,
  // kernels/bwd_kernel.h): kRowLanes lanes per (row, head) of that layout, in blocks of
  // kRowThreads. Sized by the rows the layout holds, not by max_seqlen_q, and in x alone (a grid's
  // y extent stops at 65535: one row per sequence there failed batches of 65536 sequences).
  static constexpr int kRowLanes = 8, kRowThreads = 256;
  CFA_HOST_DEVICE int64_t row_pass_blocks() const {
    const int64_t lanes = head_stats_rows() * num_q_heads * kRowLanes;
    return (lanes + kRowThreads - 1) / kRowThreads;
  }
  // Element offset of (sequence b, its query row i, head h, column 0) in dq_accum.
  CFA_HOST_DEVICE int64_t dq_offset(int32_t b, const Sequence& s, int32_t i, int32_t h) const {
    const int64_t row = (cu_seqlens_q ? 0 : int64_t(b) * seqlen_q) + s.q_start + i;
    return (row * num_q_heads + h) * head_dim;
  }
};

// The KV tile of main-kernel workgroup `wid` (Tile.q_head is the KV head, Tile.m_block the n-block).
CFA_HOST_DEVICE KvTile map_kv_workgroup(const BwdParams& p, int64_t wid) {
  const Tile t = map_workgroup(p.mapping, wid, p.kv_grid_shape());
  return KvTile{t.batch, t.q_head / p.kv_split, t.m_block, t.q_head % p.kv_split};
}

}  // namespace chiplet_fa
