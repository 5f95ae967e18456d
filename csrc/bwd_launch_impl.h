// Definition of run_bwd, included only by the generated instantiation units.
#pragma once
#include "bwd_kernel.h"
#include "bwd_launch.h"
#if defined(CFA_WGMMA)
#include "bwd_kernel_sm90.h"
#endif

namespace chiplet_fa {

template <int kBytes, typename Kernel>
void allow_smem(Kernel kernel) {
#if defined(CFA_CUDA)
  // Above 48 KB a kernel must opt in to dynamic shared memory; the attribute is per function,
  // not a stream operation, so this is safe under CUDA-graph capture.
  if (kBytes > 48 * 1024)
    cfaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                        cfaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
#else
  // AMD has no opt-in beyond the per-workgroup LDS size (64 KB on gfx942).
  (void)kernel;
  static_assert(kBytes <= arch::kMaxSmemBytes, "this instantiation needs more LDS than a workgroup has");
#endif
}

// The main (KV-block) pass: the warp-specialised kernel on sm_90a, the generic one elsewhere.
template <DType kDType, int kHeadDim, bool kCausal, bool kAtomicDq>
void run_bwd_kv(const BwdParams& p, cfaStream_t stream) {
#if defined(CFA_WGMMA)
  using Kv = BwdKvKernelSm90<kDType, kHeadDim, kCausal, kAtomicDq>;
  auto kv = bwd_kv_kernel_sm90<kDType, kHeadDim, kCausal, kAtomicDq>;
#else
  using Kv = BwdConfig<kDType, kHeadDim>;
  auto kv = bwd_kv_kernel<kDType, kHeadDim, kCausal, kAtomicDq>;
#endif
  static_assert(Kv::kBlockN == kGpuBwdBlockN, "the binding sizes the grid with kGpuBwdBlockN");
  allow_smem<Kv::kSmemBytes>(kv);
  kv<<<dim3(unsigned(grid_size(p.kv_grid_shape()))), dim3(Kv::kThreads), Kv::kSmemBytes, stream>>>(p);
}

template <DType kDType, int kHeadDim, bool kCausal>
void run_bwd(const BwdParams& p, cfaStream_t stream) {
  using T = typename arch::Element<kDType>::type;
  using Dq = BwdDqConfig<kDType, kHeadDim>;
  static_assert(Dq::kBlockM == kGpuBwdDqBlockM, "the binding sizes the dQ grid with kGpuBwdDqBlockM");
  const int64_t rows = int64_t(p.batch) * p.seqlen_q_rounded * p.num_q_heads;
  constexpr int kPreThreads = 256;
  bwd_preprocess_kernel<T><<<dim3(unsigned((rows + kPreThreads - 1) / kPreThreads)),
                             dim3(kPreThreads), 0, stream>>>(p);
  if (p.deterministic) {
    run_bwd_kv<kDType, kHeadDim, kCausal, false>(p, stream);
    auto dq = bwd_dq_kernel<kDType, kHeadDim, kCausal>;
    allow_smem<Dq::kSmemBytes>(dq);
    dq<<<dim3(unsigned(grid_size(p.grid_shape()))), dim3(Dq::kThreads), Dq::kSmemBytes, stream>>>(p);
  } else {
    run_bwd_kv<kDType, kHeadDim, kCausal, true>(p, stream);
  }
}

}  // namespace chiplet_fa
