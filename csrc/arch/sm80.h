// NVIDIA sm_80+ forward path: warp-level mma.sync (mma_sync.h). A warp owns kMT m-tiles of
// 16 query rows.
#pragma once
#include "mma_sync.h"

namespace chiplet_fa::CFA_FAMILY::arch {

// Two m-tiles per warp let each K/V fragment read from shared memory feed twice the MMAs (one
// m-tile leaves the kernel bound by ldmatrix bandwidth); above D=128 the output accumulator no
// longer fits twice in registers. 64 keys per step at D=96/128 would need > 255 registers.
constexpr int padded_head_dim(int d) { return d; }
constexpr int m_tiles_per_warp(int d) { return d <= 128 ? 2 : 1; }
constexpr int block_n(int d) { return m_tiles_per_warp(d) == 2 && d > 64 ? 32 : 64; }

template <int kRows, int kD>
using SmemTile = PaddedTile<kRows, kD>;

}  // namespace chiplet_fa::CFA_FAMILY::arch

#include "tile_gemm.h"
