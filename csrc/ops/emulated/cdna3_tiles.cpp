#define CFA_FAMILY_CDNA3 1
#include "ops/emulated/cdna3_tiles.h"

#include "kernels/fwd_kernel.h"

namespace chiplet_fa {

std::pair<int, int> emulated_fwd_tile(DType dtype, int head_dim) {
  const int padded = (head_dim + 7) / 8 * 8;
#define CFA_CASE(KIND, NS, FAMILY, DT, HD)                                     \
  if (dtype == DType::DT && padded <= HD) {                                    \
    using Cfg = cdna3::FwdConfig<DType::DT, HD, false>;                        \
    return {Cfg::kBlockM, Cfg::kBlockN};                                       \
  }
#include "kernels/instantiations/cdna3/fwd_dispatch.inc"
#undef CFA_CASE
  return {0, 0};
}

}  // namespace chiplet_fa
