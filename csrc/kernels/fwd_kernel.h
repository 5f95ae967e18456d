// FlashAttention-2 forward of the mma_sync and cdna3 families, written once over the arch interface
// (arch/arch.h); sm90 runs its own (FwdKernelSm90, kernels/sm90/fwd_kernel_sm90.h). One workgroup
// computes a kBlockM x D tile of the output; which tile comes from map_workgroup, so the
// hardware's dispatch order of block ids becomes the mapping policy's visiting order.
#pragma once
#include <cmath>

#include "arch/arch.h"
#include "kernels/fwd_params.h"
#include "mapping/mapping.h"
#include "kernels/online_softmax.h"
#include "kernels/scores.h"
#include "kernels/tile_io.h"
#include "kernels/tile_sizes.h"

namespace chiplet_fa::CFA_FAMILY {

template <DType kDType, int kHeadDim, bool kWindowed>
struct FwdConfig {
  using T = typename arch::Element<kDType>::type;
  static constexpr int kDim = arch::padded_head_dim(kHeadDim);
  static constexpr FwdTiling kTiling = fwd_tiling(kFamily, kDim);
  static constexpr int kBlockM = kTiling.block_m;
  static constexpr int kMTiles = kTiling.m_tiles;
  static constexpr int kRowsPerWarp = 16 * kMTiles;
  static constexpr int kBlockN = kTiling.block_n;
  static constexpr int kWarps = kBlockM / kRowsPerWarp;
  static constexpr int kThreads = kWarps * arch::kWarpSize;
  using QTile = arch::SmemTile<kBlockM, kDim>;
  using KVTile = arch::SmemTile<kBlockN, kDim>;
  // Q stays in shared memory (fragments are re-read per K block) next to one K and one V block.
  static constexpr int kSmemBytes = (QTile::kElems + 2 * KVTile::kElems) * int(sizeof(T));
  static_assert(kDim % 16 == 0 && kDim <= 256, "head dim must be a multiple of 16, at most 256");
};

// kPlain: scores without softcap or ALiBi (the caller knows); otherwise they are applied per block.
template <DType kDType, int kHeadDim, bool kWindowed, bool kPlain>
struct FwdKernel : FwdConfig<kDType, kHeadDim, kWindowed> {
  using Cfg = FwdConfig<kDType, kHeadDim, kWindowed>;
  using T = typename Cfg::T;
  static constexpr int kBlockM = Cfg::kBlockM, kBlockN = Cfg::kBlockN, kDim = Cfg::kDim;
  using SAcc = arch::Acc<Cfg::kMTiles, kBlockN>;
  using OAcc = arch::Acc<Cfg::kMTiles, kDim>;
  static constexpr int kSlots = SAcc::kSlots;

  static CFA_DEVICE void run(const FwdParams& p, T* smem) {
    const GridShape grid = p.grid_shape();
    if (blockIdx.x >= grid_size(grid)) return;  // a ragged grid is launched with a bound
    const Tile tile = map_workgroup(p.mapping, blockIdx.x, grid);
    const int warp = threadIdx.x / arch::kWarpSize, lane = threadIdx.x % arch::kWarpSize;
    const Sequence seq = p.sequence(tile.batch);
    const KeyWindow window = p.key_window(seq);
    const ScoreMod mod(p, tile.batch, tile.q_head, seq);
    const int m0 = tile.m_block * kBlockM;
    const auto [q, k, v, out, lse] = p.head_slabs<T>(tile.batch, tile.q_head, seq);
    const BlockRange keys = key_blocks(window, m0, min(m0 + kBlockM, seq.len_q) - 1, kBlockN);

    T* sQ = smem;
    T* sK = sQ + Cfg::QTile::kElems;
    T* sV = sK + Cfg::KVTile::kElems;
    load_tile<typename Cfg::QTile, Cfg::kThreads>(sQ, q, p.q_row_stride, m0, seq.len_q, p.head_dim, threadIdx.x);
    if (keys.end > keys.first)
      load_tile<typename Cfg::KVTile, Cfg::kThreads>(sK, k, p.k_row_stride, keys.first * kBlockN, seq.len_k,
                                                     p.head_dim, threadIdx.x);
    arch::copy_commit();

    OAcc o;
#pragma unroll
    for (int i = 0; i < OAcc::kSize; ++i) o.x[i] = 0.f;
    OnlineSoftmax<SAcc, OAcc, kBlockN, kWindowed> softmax;
    const int warp_row0 = m0 + warp * Cfg::kRowsPerWarp;

    for (int nb = keys.first; nb < keys.end; ++nb) {
      const int n0 = nb * kBlockN;
      arch::copy_wait<0>();  // K block nb (and Q on the first pass)
      arch::block_sync();    // ...visible to all; every warp is done reading the previous V
      load_tile<typename Cfg::KVTile, Cfg::kThreads>(sV, v, p.v_row_stride, n0, seq.len_k, p.head_dim, threadIdx.x);
      arch::copy_commit();

      SAcc s;
      arch::gemm_qk<T, Cfg::kMTiles, kBlockN, kDim, kBlockM>(s, sQ, sK, warp, lane);
      softmax.template logits<kPlain>(s, mod, window, n0, warp_row0, lane);

      arch::copy_wait<0>();  // V block nb
      arch::block_sync();    // ...visible to all; every warp is done reading K
      if (nb + 1 < keys.end) {
        load_tile<typename Cfg::KVTile, Cfg::kThreads>(sK, k, p.k_row_stride, n0 + kBlockN, seq.len_k, p.head_dim,
                                                       threadIdx.x);
        arch::copy_commit();
      }

      softmax.update(s, o, mod.exp_scale<kPlain>());
      arch::PFrag<T, Cfg::kMTiles, kBlockN> pf;
      arch::pack_p(pf, s);
      arch::gemm_pv<T, Cfg::kMTiles, kBlockN, kDim>(o, pf, sV, warp, lane);
    }

    arch::copy_wait<0>();  // a tile with no visible key never waited for its Q copy
    float inv_sum[kSlots];
    softmax.finish(inv_sum, lse, seq.len_q, warp_row0, lane);

    // Stage the tile in shared memory so global stores are 16-byte and row-contiguous.
    arch::block_sync();
    stage_output<typename Cfg::QTile>(smem, o, inv_sum, warp * Cfg::kRowsPerWarp, lane);
    arch::block_sync();
    store_tile<typename Cfg::QTile, Cfg::kThreads>(out, p.o_row_stride, smem, m0, 0, kBlockM, seq.len_q, p.head_dim,
                                                   threadIdx.x);
  }
};

// The bound is parenthesised: HIP's __launch_bounds__ is a variadic macro, and the template
// argument list's commas would otherwise split it into several arguments.
template <DType kDType, int kHeadDim, bool kWindowed, bool kPlain>
CFA_GLOBAL void __launch_bounds__((FwdConfig<kDType, kHeadDim, kWindowed>::kThreads))
    fwd_kernel(const FwdParams p) {
  using K = FwdKernel<kDType, kHeadDim, kWindowed, kPlain>;
  K::run(p, reinterpret_cast<typename K::T*>(dynamic_smem()));
}

}  // namespace chiplet_fa::CFA_FAMILY
