#include "ops/emulated/emulated_kernels.h"

#include "kernels/tile_sizes.h"
#include "mapping/topology.h"
#include "ops/kernel_binding.h"

namespace chiplet_fa {
namespace {

// The largest head dim this build has a cdna3 `bwd` or forward unit for in `dtype` (0: none):
// the dispatch tables list the built units in increasing head dim.
int largest_built_head_dim(DType dtype, bool bwd) {
  int largest = 0;
#define CFA_CASE(KIND, NS, FAMILY, DT, HD) \
  if (dtype == DType::DT) largest = HD;
  if (bwd) {
#include "kernels/instantiations/cdna3/bwd_dispatch.inc"
  } else {
#include "kernels/instantiations/cdna3/fwd_dispatch.inc"
  }
#undef CFA_CASE
  return largest;
}

bool covers(DType dtype, int64_t head_dim, bool bwd) {
  if (dtype != DType::kFloat16 && dtype != DType::kBFloat16) return false;
  return head_dim <= largest_built_head_dim(dtype, bwd);
}

bool takes(const Tensor& q, bool bwd) {
  const auto t = q.scalar_type();
  if (q.dim() < 3 || (t != ScalarType::Half && t != ScalarType::BFloat16)) return false;
  return covers(dtype_of(q), q.size(-1), bwd);
}

}  // namespace

bool emulated_fwd_covers(DType dtype, int64_t head_dim) { return covers(dtype, head_dim, false); }
bool emulated_fwd_takes(const Tensor& q) { return takes(q, false); }
bool emulated_bwd_takes(const Tensor& q) { return takes(q, true); }

// The emulator runs one launch at a time to completion: no stream.
FwdResult emulated_fwd(const FwdArgs& args, const OptTensor& given_out) {
  return fwd_with_kernels(args, given_out, KernelFamily::kCdna3, kCpuXcds, nullptr);
}

BwdResult emulated_bwd(const BwdArgs& args) {
  return bwd_with_kernels(args, KernelFamily::kCdna3, kCpuXcds, nullptr);
}

std::pair<int, int> emulated_fwd_tile(DType dtype, int head_dim) {
  const int built = built_head_dim(KernelFamily::kCdna3, dtype, (head_dim + 7) / 8 * 8, false);
  if (!built) return {0, 0};
  const FwdTiling tiling = cdna3_fwd_tiling(built);
  return {tiling.block_m, tiling.block_n};
}

}  // namespace chiplet_fa
