// Moving tiles between global memory and a shared-memory layout (arch::SmemTile or
// arch::PaddedTile): 16-byte pieces, row-contiguous on the global side, masked at the edges.
#pragma once
#include <cstdint>

#include "arch/arch.h"

namespace chiplet_fa::CFA_FAMILY {

// Copies rows [row0, row0 + Tile::kTileRows) of a (rows, head_dim) slab into a shared-memory
// tile, asynchronously; threads tid = 0..kThreads-1 share the work. Rows past n_rows and
// columns past head_dim are zero-filled. When the threads cover whole rows, a thread keeps
// one column and steps over rows, so its addresses are a base plus constants.
template <typename Tile, int kThreads, typename T>
CFA_DEVICE void load_tile(T* smem, const T* g, int64_t row_stride, int row0, int n_rows, int head_dim,
                          int tid) {
  constexpr int kChunks = Tile::kTileCols / 8;
  if constexpr (kThreads % kChunks == 0 && (Tile::kTileRows * kChunks) % kThreads == 0) {
    constexpr int kRowStep = kThreads / kChunks;
    const int r0 = tid / kChunks, col = (tid % kChunks) * 8;
    const bool col_ok = col < head_dim;
    const T* src = g + (row0 + r0) * row_stride + col;
    if (row0 + Tile::kTileRows <= n_rows && head_dim == Tile::kTileCols) {  // a whole tile: no checks
      // Shared addresses as one base plus constants where rows kRowStep apart share a swizzle: the
      // compiler does not see it on its own (3 instructions more a copy in the sm90 producer).
      constexpr bool kSameSwizzle = kRowStep % Tile::kSwizzleRows == 0;
      T* dst = smem + Tile::offset(r0, col);
#pragma unroll
      for (int j = 0; j < Tile::kTileRows / kRowStep; ++j)
        arch::copy_16B_async(kSameSwizzle ? dst + j * kRowStep * Tile::kRowPitch : smem + Tile::offset(r0 + j * kRowStep, col),
                             src + j * kRowStep * row_stride, true);
      return;
    }
#pragma unroll
    for (int j = 0; j < Tile::kTileRows / kRowStep; ++j) {
      const int r = r0 + j * kRowStep;
      const bool valid = col_ok && row0 + r < n_rows;
      arch::copy_16B_async(smem + Tile::offset(r, col), valid ? src + j * kRowStep * row_stride : g, valid);
    }
  } else {
    for (int c = tid; c < Tile::kTileRows * kChunks; c += kThreads) {
      const int r = c / kChunks, col = (c % kChunks) * 8;
      const bool valid = row0 + r < n_rows && col < head_dim;
      arch::copy_16B_async(smem + Tile::offset(r, col), valid ? g + (row0 + r) * row_stride + col : g, valid);
    }
  }
}

// Writes the output accumulator of one warp (rows from `tile_row` of the tile), scaled per row
// by inv_sum, into a shared-memory tile: the staging step before store_tile.
template <typename Tile, typename Acc, typename T, int kSlots>
CFA_DEVICE void stage_output(T* smem, const Acc& o, const float (&inv_sum)[kSlots], int tile_row, int lane) {
#pragma unroll
  for (int i = 0; i < Acc::kSize; ++i)
    smem[Tile::offset(tile_row + Acc::row(i, lane), Acc::col(i, lane))] = T(o.x[i] * inv_sum[Acc::slot(i)]);
}

// Stores tile rows [r_begin, r_end) to global rows row0 + r (those below n_rows), 16 bytes
// per thread and step, the columns below head_dim.
template <typename Tile, int kThreads, typename T>
CFA_DEVICE void store_tile(T* g, int64_t row_stride, const T* smem, int row0, int r_begin, int r_end, int n_rows,
                           int head_dim, int tid) {
  constexpr int kChunks = Tile::kTileCols / 8;
  for (int c = tid; c < (r_end - r_begin) * kChunks; c += kThreads) {
    const int r = r_begin + c / kChunks, col = (c % kChunks) * 8;
    if (row0 + r < n_rows && col < head_dim)
      *reinterpret_cast<uint4*>(g + (row0 + r) * row_stride + col) =
          *reinterpret_cast<const uint4*>(smem + Tile::offset(r, col));
  }
}

}  // namespace chiplet_fa::CFA_FAMILY
