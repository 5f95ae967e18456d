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
// and produces their dK/dV, looping over the G query heads of its group (no atomics for GQA).
// Its workgroups go through map_workgroup with rows = (batch, kv_head) and blocks = n-blocks,
// GridShape{batch, num_kv_heads, num_n_blocks, num_xcds, kv_block_offsets}: the ACC is the KV
// head, so the Q/dO/LSE/D it streams stay in one L2 domain. The deterministic dQ pass is
// query-block parallel and uses the forward's grid (FwdParams::grid_shape(), block_m rows).
//
// Ordered dQ (deterministic mode of the sm90 main pass, dq_turns set): each query block's dQ
// shares are added key block by key block in a fixed order, a workgroup waiting for its
// neighbour's turn: ascending n, or descending n under a window (the diagonal block goes first,
// so workgroups that start together do not wait). A workgroup only ever waits for one dispatched
// before it (hardware dispatches in grid order), so the KV grid walks each row's n-blocks in the
// order of the turns: descending under a window (GridShape::longest_first reverses a row).
// With dq_from_last (kernels/launch.h's dq_walks_from_last) a workgroup walks its query blocks
// from the last instead, and the turns ascend under a window too: key block n - 1 has no more
// blocks above any query block than n has, so it gets there no later.
#pragma once
#include <cstdint>

#include "kernels/fwd_params.h"
#include "mapping/mapping.h"

namespace chiplet_fa {

struct KvTile {
  int32_t batch;
  int32_t kv_head;
  int32_t n_block;
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
  bool deterministic;         // dQ reproducible: by ordered reductions (dq_turns) or by a separate query-block pass
  // Ordered dQ: per (sequence, query head, block of kDqTurnRows query rows, 64-column panel of the
  // head dim) the key block that last added its share, plus one (zeroed by the host); nullptr otherwise.
  int32_t* dq_turns;
  bool dq_from_last;          // ordered dQ's walk: query blocks from the last, the group's heads inner
  int32_t slice_col0;         // head dims split into column slices: the first column of dK, dV, dQ a launch writes

  static constexpr int32_t kDqTurnRows = 64;

  CFA_HOST_DEVICE int32_t num_n_blocks() const { return (seqlen_k + block_n - 1) / block_n; }
  CFA_HOST_DEVICE GridShape kv_grid_shape() const {
    return GridShape{batch, num_kv_heads, num_n_blocks(), num_xcds, kv_block_offsets, dq_turns && windowed && !dq_from_last};
  }
  CFA_HOST_DEVICE int64_t dq_turn_blocks() const { return (seqlen_q + kDqTurnRows - 1) / kDqTurnRows; }
  CFA_HOST_DEVICE int32_t dq_turn_panels() const { return (head_dim + 63) / 64; }
  CFA_HOST_DEVICE int64_t dq_turns_size() const {
    return int64_t(batch) * num_q_heads * dq_turn_blocks() * dq_turn_panels();
  }
  CFA_HOST_DEVICE int32_t* dq_turn(int32_t b, int32_t h, int32_t m_block, int panel) const {
    return dq_turns + ((int64_t(b) * num_q_heads + h) * dq_turn_blocks() + m_block) * dq_turn_panels() + panel;
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
    return {static_cast<const T*>(k) + b * k_batch_stride + s.k_start * k_row_stride + kv_head * k_head_stride,
            static_cast<const T*>(v) + b * v_batch_stride + s.k_start * v_row_stride + kv_head * v_head_stride,
            static_cast<T*>(dk) + b * dk_batch_stride + s.k_start * dk_row_stride + kv_head * dk_head_stride,
            static_cast<T*>(dv) + b * dv_batch_stride + s.k_start * dv_row_stride + kv_head * dv_head_stride};
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
  // Element offset of (sequence b, its query row i, head h, column 0) in dq_accum.
  CFA_HOST_DEVICE int64_t dq_offset(int32_t b, const Sequence& s, int32_t i, int32_t h) const {
    const int64_t row = (cu_seqlens_q ? 0 : int64_t(b) * seqlen_q) + s.q_start + i;
    return (row * num_q_heads + h) * head_dim;
  }
};

// The KV tile of main-kernel workgroup `wid` (Tile.q_head is the KV head, Tile.m_block the n-block).
CFA_HOST_DEVICE KvTile map_kv_workgroup(const BwdParams& p, int64_t wid) {
  const Tile t = map_workgroup(p.mapping, wid, p.kv_grid_shape());
  return KvTile{t.batch, t.q_head, t.m_block};
}

}  // namespace chiplet_fa
