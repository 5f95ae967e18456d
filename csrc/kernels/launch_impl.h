// Definitions of the entry points kernels/launch.h declares, for the unit's family; included only
// by the generated instantiation units.
#pragma once
#include "arch/family.h"
#include "kernels/bwd_kernel.h"
#if defined(CFA_FAMILY_SM90)
#include "kernels/sm90/bwd_kernel.h"
#include "kernels/sm90/fwd_kernel.h"
#else
#include "kernels/fwd_kernel.h"
#endif
#include "kernels/launch.h"

namespace chiplet_fa::CFA_FAMILY {

inline constexpr KernelGeometry kGeometry = geometry(kFamily);

// Above 48 KB a kernel must opt in to dynamic shared memory on NVIDIA; the attribute is per
// function, not a stream operation, so this is safe under CUDA-graph capture. AMD has no opt-in
// beyond the per-workgroup LDS size (64 KB on gfx942): head dims above 128 do not fit there, and
// CMake's HIP build leaves them out.
template <int kBytes, typename Kernel>
void allow_smem(Kernel kernel) {
#if defined(CFA_CUDA)
  if (kBytes > 48 * 1024)
    cfaFuncSetAttribute(reinterpret_cast<const void*>(kernel), cfaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
#else
  (void)kernel;
  static_assert(kBytes <= arch::kMaxSmemBytes, "this instantiation needs more LDS than a workgroup has");
#endif
}

template <DType kDType, int kHeadDim, bool kCausal>
void run_fwd(const FwdParams& p, cfaStream_t stream) {
  using Cfg = FwdKernel<kDType, kHeadDim, kCausal>;
  static_assert(Cfg::kBlockM == kGeometry.fwd_block_m, "the binding sizes the grid with the family's geometry");
  auto kernel = fwd_kernel<kDType, kHeadDim, kCausal>;
  allow_smem<Cfg::kSmemBytes>(kernel);
  CFA_LAUNCH(kernel, dim3(unsigned(grid_size(p.grid_shape()))), dim3(Cfg::kThreads), Cfg::kSmemBytes, stream, p);
}

// The backward's main (KV-block) pass: warp-specialised in the sm90 family, generic elsewhere.
template <DType kDType, int kHeadDim, bool kCausal, bool kAtomicDq>
void run_bwd_kv(const BwdParams& p, cfaStream_t stream) {
#if defined(CFA_FAMILY_SM90)
  using Kv = BwdKvKernelSm90<kDType, kHeadDim, kCausal, kAtomicDq>;
  auto kv = bwd_kv_kernel_sm90<kDType, kHeadDim, kCausal, kAtomicDq>;
#else
  using Kv = BwdConfig<kDType, kHeadDim>;
  auto kv = bwd_kv_kernel<kDType, kHeadDim, kCausal, kAtomicDq>;
#endif
  static_assert(Kv::kBlockN == kGeometry.bwd_block_n, "the binding sizes the grid with the family's geometry");
  allow_smem<Kv::kSmemBytes>(kv);
  CFA_LAUNCH(kv, dim3(unsigned(grid_size(p.kv_grid_shape()))), dim3(Kv::kThreads), Kv::kSmemBytes, stream, p);
}

template <DType kDType, int kHeadDim, bool kCausal>
void run_bwd(const BwdParams& p, cfaStream_t stream) {
  using T = typename arch::Element<kDType>::type;
  using Dq = BwdDqConfig<kDType, kHeadDim>;
  static_assert(Dq::kBlockM == kGeometry.bwd_dq_block_m, "the binding sizes the dQ grid with the family's geometry");
  const int64_t rows = int64_t(p.batch) * p.seqlen_q_rounded * p.num_q_heads;
  constexpr int kPreThreads = 256;
  CFA_LAUNCH(bwd_preprocess_kernel<T>, dim3(unsigned((rows + kPreThreads - 1) / kPreThreads)), dim3(kPreThreads), 0,
             stream, p);
  if (p.deterministic) {
    run_bwd_kv<kDType, kHeadDim, kCausal, false>(p, stream);
    auto dq = bwd_dq_kernel<kDType, kHeadDim, kCausal>;
    allow_smem<Dq::kSmemBytes>(dq);
    CFA_LAUNCH(dq, dim3(unsigned(grid_size(p.grid_shape()))), dim3(Dq::kThreads), Dq::kSmemBytes, stream, p);
  } else {
    run_bwd_kv<kDType, kHeadDim, kCausal, true>(p, stream);
  }
}

}  // namespace chiplet_fa::CFA_FAMILY
