// Packed (variable-length) batches: the ragged grid of one pass, from cu_seqlens. The GPU launch
// code runs it on the device (no host sync) before the pass; the CPU path on the host.
#pragma once
#include <cstdint>

#include "platform.h"

namespace chiplet_fa {

// block_offsets[b] = sum over sequences before b of ceil(len / block) (batch + 1 entries). Returns
// false, leaving a grid of no blocks, when cu_seqlens is not a packing of `total` rows into
// sequences of at most max_len rows (cu[0] == 0, non-decreasing, cu[batch] == total): the kernels
// then touch no row.
CFA_HOST_DEVICE bool fill_block_offsets(const int32_t* cu_seqlens, int32_t batch, int64_t total, int32_t max_len,
                                        int32_t block, int32_t* block_offsets) {
  bool ok = cu_seqlens[0] == 0 && cu_seqlens[batch] == total;
  int32_t sum = 0;
  for (int32_t b = 0; b < batch && ok; ++b) {
    const int32_t len = cu_seqlens[b + 1] - cu_seqlens[b];
    ok = len >= 0 && len <= max_len;
    block_offsets[b] = sum;
    sum += (len + block - 1) / block;
  }
  if (!ok) sum = 0;
  for (int32_t b = ok ? batch : 0; b <= batch; ++b) block_offsets[b] = sum;
  return ok;
}

}  // namespace chiplet_fa
