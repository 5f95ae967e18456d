// Definition of run_fwd, included only by the generated instantiation units.
#pragma once
#if defined(CFA_WGMMA)
#include "fwd_kernel_sm90.h"  // warp-specialised: the Hopper-only build
#else
#include "fwd_kernel.h"
#endif
#include "fwd_launch.h"

namespace chiplet_fa {

template <DType kDType, int kHeadDim, bool kCausal>
void run_fwd(const FwdParams& params, cfaStream_t stream) {
  using Cfg = FwdKernel<kDType, kHeadDim, kCausal>;
  static_assert(Cfg::kBlockM == kGpuBlockM, "the binding sizes the grid with kGpuBlockM");
  auto kernel = fwd_kernel<kDType, kHeadDim, kCausal>;
#if defined(CFA_CUDA)
  // Above 48 KB a kernel must opt in to dynamic shared memory; the attribute is per function,
  // not a stream operation, so this is safe under CUDA-graph capture.
  if (Cfg::kSmemBytes > 48 * 1024)
    cfaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                        cfaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
#else
  // AMD has no opt-in beyond the per-workgroup LDS size (64 KB on gfx942): head dims above 128
  // do not fit, and CMake's HIP build leaves them out.
  static_assert(Cfg::kSmemBytes <= arch::kMaxSmemBytes, "this instantiation needs more LDS than a workgroup has");
#endif
  const int64_t grid = grid_size(params.grid_shape());
  kernel<<<dim3(unsigned(grid)), dim3(Cfg::kThreads), Cfg::kSmemBytes, stream>>>(params);
}

}  // namespace chiplet_fa
