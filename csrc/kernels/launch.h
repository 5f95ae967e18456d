// Host entry points of the GPU kernels, one generated translation unit per (family, dtype, head
// dim, causal) in kernels/instantiations/<family>/, so builds parallelise. The bindings
// (ops/gpu/) call the family the device runs; this header declares every family's entry points
// and the launch geometry each fixes for the host (its tiles: kernels/tile_sizes.h).
#pragma once
#include "arch/kernel_family.h"
#include "kernels/bwd_params.h"
#include "kernels/tile_sizes.h"
#include "platform.h"

namespace chiplet_fa {

struct KernelGeometry {
  int bwd_row_pad;     // softmax_d and lse_log2 rows are padded to whole blocks of this many
  bool fwd_persistent;  // the forward runs persistent workers: FwdParams::tile_counters needed
};

// The sm90 forward is persistent.
constexpr KernelGeometry geometry(KernelFamily f) { return KernelGeometry{64, f == KernelFamily::kSm90}; }

#if defined(CFA_CUDA) || defined(CFA_HIP) || defined(CFA_EMULATE)
// run_bwd: preprocess, main pass (dQ added atomically or in fixed point, or not at all when
// deterministic elsewhere than sm90) and then the dQ pass or the fixed-point conversion.
#define CFA_DECLARE_LAUNCHERS(family)                                    \
  namespace family {                                                     \
  template <DType kDType, int kHeadDim, bool kWindowed>                    \
  void run_fwd(const FwdParams& params, cfaStream_t stream);             \
  template <DType kDType, int kHeadDim, bool kWindowed>                    \
  void run_bwd(const BwdParams& params, cfaStream_t stream);             \
  }
CFA_DECLARE_LAUNCHERS(mma_sync)
CFA_DECLARE_LAUNCHERS(sm90)
CFA_DECLARE_LAUNCHERS(cdna3)
#undef CFA_DECLARE_LAUNCHERS
#endif

}  // namespace chiplet_fa
