// NVIDIA sm_80+ forward path: warp-level mma.sync (mma_sync.h). A warp owns kMT m-tiles of
// 16 query rows.
#pragma once
#include "mma_sync.h"

namespace chiplet_fa::CFA_FAMILY::arch {

// Its tiles: kernels/tile_sizes.h (mma_sync_fwd_tiling).
constexpr int padded_head_dim(int d) { return d; }

template <int kRows, int kD>
using SmemTile = PaddedTile<kRows, kD>;

}  // namespace chiplet_fa::CFA_FAMILY::arch

#include "tile_gemm.h"
