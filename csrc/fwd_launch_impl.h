// Definition of run_fwd, included only by the generated instantiation units.
#pragma once
#include "fwd_kernel.h"
#include "fwd_launch.h"

namespace chiplet_fa {

template <DType kDType, int kHeadDim, bool kCausal>
void run_fwd(const FwdParams& params, cfaStream_t stream) {
  using Cfg = FwdConfig<kDType, kHeadDim, kCausal>;
  static_assert(Cfg::kBlockM == kGpuBlockM, "the binding sizes the grid with kGpuBlockM");
  auto kernel = fwd_kernel<kDType, kHeadDim, kCausal>;
  // Above 48 KB a kernel must opt in to dynamic shared memory; the attribute is per function,
  // not a stream operation, so this is safe under CUDA-graph capture.
  if (Cfg::kSmemBytes > 48 * 1024)
    cfaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                        cfaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
  const int64_t grid = grid_size(params.grid_shape());
  kernel<<<dim3(unsigned(grid)), dim3(Cfg::kThreads), Cfg::kSmemBytes, stream>>>(params);
}

}  // namespace chiplet_fa
