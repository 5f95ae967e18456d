// Host entry points of the GPU backward kernels, one generated translation unit per
// (dtype, head dim, causal) instantiation (instantiations/bwd_*.cu).
#pragma once
#include "bwd_params.h"
#include "platform.h"

namespace chiplet_fa {

// Query rows per workgroup of the deterministic dQ pass (fixes p.block_m for the binding).
constexpr int kGpuBwdDqBlockM = 64;
// Keys per workgroup of the main pass (fixes p.block_n): the sm_90a kernel gives each of its
// two consumer warpgroups 64 keys.
#if defined(CFA_WGMMA)
constexpr int kGpuBwdBlockN = 128;
#else
constexpr int kGpuBwdBlockN = 64;
#endif
// softmax_d and lse_log2 rows are padded to whole query blocks of every backward kernel.
constexpr int kGpuBwdRowPad = 64;
// Head dims with a backward instantiation; other multiples of 8 up to 128 run in the next larger one.
constexpr int kGpuBwdHeadDims[] = {32, 64, 96, 128};

#if defined(CFA_CUDA) || defined(CFA_HIP)
// Preprocess, main pass (atomic dQ unless p.deterministic) and, when deterministic, the dQ pass.
template <DType kDType, int kHeadDim, bool kCausal>
void run_bwd(const BwdParams& params, cfaStream_t stream);
#endif

}  // namespace chiplet_fa
