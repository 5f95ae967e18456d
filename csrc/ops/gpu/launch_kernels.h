// From params to the generated kernel instantiations: the one place that knows which
// (family, dtype, head dim, windowed) units this build compiled.
#pragma once
#include <type_traits>

#include "kernels/launch.h"

namespace chiplet_fa {

// Runs the smallest built instantiation of `family` whose head dim covers p.head_dim (forward
// for FwdParams, backward for BwdParams; the windowed one when p.windowed); false when this
// build has none. CMake defines CHIPLET_FA_HAS_<family>_<kind>_<dtype>_<hdim> for each unit it
// compiles, which switches its case of the generated tables on; cases run in increasing head dim.
template <typename Params>
bool launch_kernels(KernelFamily family, DType dtype, const Params& p, cfaStream_t stream) {
#define CFA_CASE(KIND, NS, FAMILY, DT, HD)                                        \
  if (family == KernelFamily::FAMILY && dtype == DType::DT && p.head_dim <= HD) { \
    if (p.windowed) NS::run_##KIND<DType::DT, HD, true>(p, stream);               \
    else NS::run_##KIND<DType::DT, HD, false>(p, stream);                         \
    return true;                                                                  \
  }
  if constexpr (std::is_same_v<Params, BwdParams>) {
#include "kernels/instantiations/cdna3/bwd_dispatch.inc"
#include "kernels/instantiations/mma_sync/bwd_dispatch.inc"
#include "kernels/instantiations/sm90/bwd_dispatch.inc"
  } else {
#include "kernels/instantiations/cdna3/fwd_dispatch.inc"
#include "kernels/instantiations/mma_sync/fwd_dispatch.inc"
#include "kernels/instantiations/sm90/fwd_dispatch.inc"
  }
#undef CFA_CASE
  return false;
}

// The head dim of the instantiation launch_kernels runs for head_dim on `family` (0: none built),
// backward or forward: it fixes the backward main pass's keys per workgroup (bwd_block_n) and the
// forward's rows per tile (fwd_block_m).
inline int built_head_dim(KernelFamily family, DType dtype, int head_dim, bool backward) {
#define CFA_CASE(KIND, NS, FAMILY, DT, HD) \
  if (family == KernelFamily::FAMILY && dtype == DType::DT && head_dim <= HD) return HD;
  if (backward) {
#include "kernels/instantiations/cdna3/bwd_dispatch.inc"
#include "kernels/instantiations/mma_sync/bwd_dispatch.inc"
#include "kernels/instantiations/sm90/bwd_dispatch.inc"
  } else {
#include "kernels/instantiations/cdna3/fwd_dispatch.inc"
#include "kernels/instantiations/mma_sync/fwd_dispatch.inc"
#include "kernels/instantiations/sm90/fwd_dispatch.inc"
  }
#undef CFA_CASE
  return 0;
}

}  // namespace chiplet_fa
