// Everything a backward kernel needs, as raw pointers and element strides. It extends the
// forward's params (q, k, v, out, softmax_lse and the problem shape) with the gradients.
//
// Layouts: dout like q; dk/dv like k; dq_accum (B, N_q, H_q, D) and softmax_d (B, H_q,
// seqlen_q_rounded) contiguous in the accumulator type (float, double for fp64 inputs). The GPU
// rounds the rows up to whole query blocks (padding D = 0) and adds lse_log2 of the same shape,
// so its kernels read both per block without bounds checks.
//
// Grids. The main kernel is KV-block parallel: one workgroup owns block_n keys of one KV head
// and produces their dK/dV, looping over the G query heads of its group (no atomics for GQA).
// Its workgroups go through map_workgroup with rows = (batch, kv_head) and blocks = n-blocks,
// GridShape{batch, num_kv_heads, num_n_blocks, num_xcds}: the ACC is the KV head, so the
// Q/dO/LSE/D it streams stay in one L2 domain. The deterministic dQ pass is query-block
// parallel and uses the forward's grid (FwdParams::grid_shape()).
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
  int32_t seqlen_q_rounded;  // rows of softmax_d and lse_log2 per (batch, head)

  int64_t do_batch_stride, do_row_stride, do_head_stride;
  int64_t dk_batch_stride, dk_row_stride, dk_head_stride;
  int64_t dv_batch_stride, dv_row_stride, dv_head_stride;

  int32_t block_n;     // keys per workgroup of the main kernel
  bool deterministic;  // dQ from a separate query-block pass instead of atomics

  CFA_HOST_DEVICE int32_t num_n_blocks() const { return (seqlen_k + block_n - 1) / block_n; }
  CFA_HOST_DEVICE GridShape kv_grid_shape() const {
    return GridShape{batch, num_kv_heads, num_n_blocks(), num_xcds};
  }
  CFA_HOST_DEVICE int32_t group_size() const { return num_q_heads / num_kv_heads; }
};

// The KV tile of main-kernel workgroup `wid` (Tile.q_head is the KV head, Tile.m_block the n-block).
CFA_HOST_DEVICE KvTile map_kv_workgroup(const BwdParams& p, int64_t wid) {
  const Tile t = map_workgroup(p.mapping, wid, p.kv_grid_shape());
  return KvTile{t.batch, t.q_head, t.m_block};
}

}  // namespace chiplet_fa
