// The sm90 forward's epilogue: a warp's rows of O, normalised, straight from the accumulator to
// global memory. Each thread holds column pairs of its rows, so a store is 4 bytes and a warp's
// eight rows of one 8-column group fill half of eight 32-byte sectors, the next group the other
// half; the L2 merges them before anything reaches DRAM. Nothing goes through shared memory, so
// a persistent worker's Q buffer is free for the next tile as soon as the last QK^T is done.
#pragma once
#include <cstdint>

#include "arch/arch.h"

namespace chiplet_fa::CFA_FAMILY {

// Rows row0 + Acc::row(i, lane) of o (scaled per row slot by inv_sum), those below n_rows and the
// columns below head_dim (a multiple of 8), to g with rows row_stride apart.
template <typename Acc, typename T, int kSlots>
CFA_DEVICE void store_output(T* g, int64_t row_stride, const Acc& o, const float (&inv_sum)[kSlots], int row0,
                             int n_rows, int head_dim, int lane) {
#pragma unroll
  for (int i = 0; i < Acc::kSize; i += 2) {
    const int row = row0 + Acc::row(i, lane), col = Acc::col(i, lane);
    if (row < n_rows && col < head_dim) {
      const float scale = inv_sum[Acc::slot(i)];
      *reinterpret_cast<uint32_t*>(g + row * row_stride + col) = arch::pack2<T>(o.x[i] * scale, o.x[i + 1] * scale);
    }
  }
}

}  // namespace chiplet_fa::CFA_FAMILY
