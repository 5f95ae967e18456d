// The CPU backend: the reference kernels CI runs, with the GPU kernels' structure (tiles visited
// through map_workgroup, packed batches on the same ragged grids).
#pragma once
#include <optional>
#include <vector>

#include "kernels/varlen.h"
#include "ops/op_entry.h"

namespace chiplet_fa {

constexpr int kCpuBlockM = 64;
constexpr int kCpuBlockN = 64;

// The ragged grid of a packed batch for blocks of `block` rows, built on the host (cu_seqlens were
// checked by the front end); offsets() is nullptr for a dense batch (cu_seqlens nullptr).
class RaggedGrid {
 public:
  RaggedGrid(const int32_t* cu_seqlens, int32_t batch, int32_t block) {
    if (!cu_seqlens) return;
    offsets_.resize(size_t(batch) + 1);
    fill_block_offsets(cu_seqlens, batch, cu_seqlens[batch], INT32_MAX, block, offsets_.data());
  }
  int32_t* offsets() { return offsets_.empty() ? nullptr : offsets_.data(); }

 private:
  std::vector<int32_t> offsets_;
};

FwdResult fwd_cpu(const FwdArgs& args, const OptTensor& out);
BwdResult bwd_cpu(const BwdArgs& args);

}  // namespace chiplet_fa
