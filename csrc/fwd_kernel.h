// FlashAttention-2 forward, written once over the arch interface (arch/arch.h). One workgroup
// computes a kBlockM x D tile of the output; which tile comes from map_workgroup, so the
// hardware's dispatch order of block ids becomes the mapping policy's visiting order.
#pragma once
#include <cmath>

#include "arch/arch.h"
#include "fwd_params.h"
#include "mapping.h"

namespace chiplet_fa {

template <DType kDType, int kHeadDim, bool kCausal>
struct FwdConfig {
  using T = typename arch::Element<kDType>::type;
  static constexpr int kDim = arch::padded_head_dim(kHeadDim);
  static constexpr int kBlockM = 128;
  static constexpr int kMTiles = arch::m_tiles_per_warp(kDim);
  static constexpr int kRowsPerWarp = 16 * kMTiles;
  static constexpr int kBlockN = arch::block_n(kDim);
  static constexpr int kWarps = kBlockM / kRowsPerWarp;
  static constexpr int kThreads = kWarps * arch::kWarpSize;
  using QTile = arch::SmemTile<kBlockM, kDim>;
  using KVTile = arch::SmemTile<kBlockN, kDim>;
  // Q stays in shared memory (fragments are re-read per K block) next to one K and one V block.
  static constexpr int kSmemBytes = (QTile::kElems + 2 * KVTile::kElems) * int(sizeof(T));
  static_assert(kDim % 16 == 0 && kDim <= 256, "head dim must be a multiple of 16, at most 256");
};

// Copies rows [row0, row0 + Tile::kTileRows) of a (rows, head_dim) slab into a shared-memory
// tile in 16-byte pieces, kThreads threads sharing the work; rows past n_rows and columns
// past head_dim are zero-filled.
template <typename Tile, int kThreads, typename T>
CFA_DEVICE void load_tile(T* smem, const T* g, int64_t row_stride, int row0, int n_rows, int head_dim) {
  constexpr int kChunks = Tile::kTileCols / 8;
  for (int c = threadIdx.x; c < Tile::kTileRows * kChunks; c += kThreads) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const bool valid = row0 + r < n_rows && col < head_dim;
    arch::copy_16B_async(smem + Tile::offset(r, col), valid ? g + (row0 + r) * row_stride + col : g, valid);
  }
}

template <DType kDType, int kHeadDim, bool kCausal>
struct FwdKernel : FwdConfig<kDType, kHeadDim, kCausal> {
  using Cfg = FwdConfig<kDType, kHeadDim, kCausal>;
  using T = typename Cfg::T;
  static constexpr int kBlockM = Cfg::kBlockM, kBlockN = Cfg::kBlockN, kDim = Cfg::kDim;
  using SAcc = arch::Acc<Cfg::kMTiles, kBlockN>;
  using OAcc = arch::Acc<Cfg::kMTiles, kDim>;
  static constexpr int kSlots = SAcc::kSlots;

  static CFA_DEVICE void run(const FwdParams& p, T* smem) {
    const Tile tile = map_workgroup(p.mapping, blockIdx.x, p.grid_shape());
    const int warp = threadIdx.x / arch::kWarpSize, lane = threadIdx.x % arch::kWarpSize;
    const int m0 = tile.m_block * kBlockM;
    const int kv_head = tile.q_head / (p.num_q_heads / p.num_kv_heads);
    const T* q = static_cast<const T*>(p.q) + tile.batch * p.q_batch_stride + tile.q_head * p.q_head_stride;
    const T* k = static_cast<const T*>(p.k) + tile.batch * p.k_batch_stride + kv_head * p.k_head_stride;
    const T* v = static_cast<const T*>(p.v) + tile.batch * p.v_batch_stride + kv_head * p.v_head_stride;
    T* out = static_cast<T*>(p.out) + tile.batch * p.o_batch_stride + tile.q_head * p.o_head_stride;
    float* lse = p.softmax_lse + (int64_t(tile.batch) * p.num_q_heads + tile.q_head) * p.seqlen_q;

    // Keys past the last row's causal limit are never loaded.
    int n_end = p.seqlen_k;
    if (kCausal) n_end = min(n_end, m0 + kBlockM + p.causal_offset());
    const int n_blocks = n_end > 0 ? (n_end + kBlockN - 1) / kBlockN : 0;

    T* sQ = smem;
    T* sK = sQ + Cfg::QTile::kElems;
    T* sV = sK + Cfg::KVTile::kElems;
    load_tile<typename Cfg::QTile, Cfg::kThreads>(sQ, q, p.q_row_stride, m0, p.seqlen_q, p.head_dim);
    if (n_blocks > 0) load_tile<typename Cfg::KVTile, Cfg::kThreads>(sK, k, p.k_row_stride, 0, p.seqlen_k, p.head_dim);
    arch::copy_commit();

    OAcc o;
#pragma unroll
    for (int i = 0; i < OAcc::kSize; ++i) o.x[i] = 0.f;
    float row_max[kSlots], row_sum[kSlots];
#pragma unroll
    for (int r = 0; r < kSlots; ++r) { row_max[r] = -INFINITY; row_sum[r] = 0.f; }
    const float scale_log2 = float(p.softmax_scale) * float(M_LOG2E);
    const int warp_row0 = m0 + warp * Cfg::kRowsPerWarp;

    for (int nb = 0; nb < n_blocks; ++nb) {
      const int n0 = nb * kBlockN;
      arch::copy_wait<0>();  // K block nb (and Q on the first pass)
      arch::block_sync();    // ...visible to all; every warp is done reading the previous V
      load_tile<typename Cfg::KVTile, Cfg::kThreads>(sV, v, p.v_row_stride, n0, p.seqlen_k, p.head_dim);
      arch::copy_commit();

      SAcc s;
      arch::gemm_qk<T, Cfg::kMTiles, kBlockN, kDim, kBlockM>(s, sQ, sK, warp, lane);
      const bool need_mask = n0 + kBlockN > p.seqlen_k ||
                             (kCausal && n0 + kBlockN - 1 > warp_row0 + p.causal_offset());
#pragma unroll
      for (int i = 0; i < SAcc::kSize; ++i) {
        s.x[i] *= scale_log2;
        if (need_mask) {
          const int col = n0 + SAcc::col(i, lane);
          const int row = warp_row0 + SAcc::row(i, lane);
          if (col >= p.seqlen_k || (kCausal && col > row + p.causal_offset())) s.x[i] = -INFINITY;
        }
      }

      arch::copy_wait<0>();  // V block nb
      arch::block_sync();    // ...visible to all; every warp is done reading K
      if (nb + 1 < n_blocks) {
        load_tile<typename Cfg::KVTile, Cfg::kThreads>(sK, k, p.k_row_stride, n0 + kBlockN, p.seqlen_k, p.head_dim);
        arch::copy_commit();
      }

      // Online softmax in base 2 against a reference max per row. The reference only moves
      // (and O, row_sum are rescaled) when some row's max grew by more than kRescaleSlack, so
      // most steps skip the rescale; p = 2^(s - ref) stays below 2^kRescaleSlack. A row with
      // no visible key yet keeps ref = -inf and contributes p = 0.
      constexpr float kRescaleSlack = 8.f;
      float block_max[kSlots], ref[kSlots], block_sum[kSlots];
#pragma unroll
      for (int r = 0; r < kSlots; ++r) block_max[r] = -INFINITY;
#pragma unroll
      for (int i = 0; i < SAcc::kSize; ++i)
        block_max[SAcc::slot(i)] = fmaxf(block_max[SAcc::slot(i)], s.x[i]);
      bool grow = false;
#pragma unroll
      for (int r = 0; r < kSlots; ++r) {
        block_max[r] = arch::row_allreduce_max(block_max[r]);
        grow |= block_max[r] > row_max[r] + kRescaleSlack;
      }
      if (arch::warp_any(grow)) {
        float alpha[kSlots];
#pragma unroll
        for (int r = 0; r < kSlots; ++r) {
          const float new_max = fmaxf(row_max[r], block_max[r]);
          alpha[r] = new_max == -INFINITY ? 1.f : exp2f(row_max[r] - new_max);
          row_max[r] = new_max;
          row_sum[r] *= alpha[r];
        }
#pragma unroll
        for (int i = 0; i < OAcc::kSize; ++i) o.x[i] *= alpha[OAcc::slot(i)];
      }
#pragma unroll
      for (int r = 0; r < kSlots; ++r) {
        ref[r] = row_max[r] == -INFINITY ? 0.f : row_max[r];
        block_sum[r] = 0.f;
      }
#pragma unroll
      for (int i = 0; i < SAcc::kSize; ++i) {
        s.x[i] = exp2f(s.x[i] - ref[SAcc::slot(i)]);
        block_sum[SAcc::slot(i)] += s.x[i];
      }
      // Partial row sums stay per lane (lanes of a row share ref): one reduction at the end.
#pragma unroll
      for (int r = 0; r < kSlots; ++r) row_sum[r] += block_sum[r];
      arch::PFrag<T, Cfg::kMTiles, kBlockN> pf;
      arch::pack_p(pf, s);
      arch::gemm_pv<T, Cfg::kMTiles, kBlockN, kDim>(o, pf, sV, warp, lane);
    }

    arch::copy_wait<0>();  // a tile with no visible key never waited for its Q copy
    float inv_sum[kSlots];
#pragma unroll
    for (int r = 0; r < kSlots; ++r) {
      row_sum[r] = arch::row_allreduce_sum(row_sum[r]);
      inv_sum[r] = row_sum[r] > 0.f ? 1.f / row_sum[r] : 0.f;  // fully masked row -> 0
      const int row = warp_row0 + arch::slot_row(r, lane);
      if (arch::owns_row_stats(lane) && row < p.seqlen_q)
        lse[row] = row_sum[r] > 0.f ? row_max[r] * float(M_LN2) + logf(row_sum[r]) : -INFINITY;
    }

    // Stage the tile in shared memory so global stores are 16-byte and row-contiguous.
    arch::block_sync();
    T* sO = smem;
#pragma unroll
    for (int i = 0; i < OAcc::kSize; ++i) {
      const int row = warp * Cfg::kRowsPerWarp + OAcc::row(i, lane);
      sO[Cfg::QTile::offset(row, OAcc::col(i, lane))] = T(o.x[i] * inv_sum[OAcc::slot(i)]);
    }
    arch::block_sync();
    constexpr int kChunks = kDim / 8;
    for (int c = threadIdx.x; c < kBlockM * kChunks; c += Cfg::kThreads) {
      const int r = c / kChunks, col = (c % kChunks) * 8;
      if (m0 + r < p.seqlen_q && col < p.head_dim)
        *reinterpret_cast<uint4*>(out + (m0 + r) * p.o_row_stride + col) =
            *reinterpret_cast<const uint4*>(sO + Cfg::QTile::offset(r, col));
    }
  }
};

// The bound is parenthesised: HIP's __launch_bounds__ is a variadic macro, and the template
// argument list's commas would otherwise split it into several arguments.
template <DType kDType, int kHeadDim, bool kCausal>
CFA_GLOBAL void __launch_bounds__((FwdConfig<kDType, kHeadDim, kCausal>::kThreads))
    fwd_kernel(const FwdParams p) {
  using K = FwdKernel<kDType, kHeadDim, kCausal>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];  // wgmma swizzle atoms
  K::run(p, reinterpret_cast<typename K::T*>(smem_raw));
}

}  // namespace chiplet_fa
