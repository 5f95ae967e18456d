// Host entry points of the GPU forward kernels. Each (dtype, head dim, causal) instantiation
// lives in its own generated translation unit (instantiations/), so builds parallelise.
#pragma once
#include "fwd_params.h"
#include "platform.h"

namespace chiplet_fa {

// Rows per workgroup of every GPU forward instantiation (fixes num_m_blocks for the mapping).
constexpr int kGpuBlockM = 128;

#if defined(CFA_CUDA) || defined(CFA_HIP)
template <DType kDType, int kHeadDim, bool kCausal>
void run_fwd(const FwdParams& params, cfaStream_t stream);
#endif

}  // namespace chiplet_fa
