// Host entry points of the decoding kernels: one generated unit per (family, dtype, head dim) in
// kernels/instantiations/<family>/decode_*.cu. The sm90 family decodes with the mma_sync kernels
// its build also holds: a decoding tile has a few rows (wgmma's smallest is 64) and the step is
// bound by the cache's bytes, not by the products.
#pragma once
#include "arch/kernel_family.h"
#include "kernels/decode/decode_params.h"
#include "kernels/tile_sizes.h"
#include "platform.h"

namespace chiplet_fa {

// Rows of a decoding tile in every family: (token, query head) pairs of one KV head's group.
constexpr int kDecodeBlockM = decode_tiling(KernelFamily::kMmaSync, 128).block_m;

// The family whose decoding kernels a device of `family` runs.
constexpr KernelFamily decode_family(KernelFamily family) {
  return family == KernelFamily::kSm90 ? KernelFamily::kMmaSync : family;
}

#if defined(CFA_CUDA) || defined(CFA_HIP) || defined(CFA_EMULATE)
// run_decode: the checks and appends (decode_prepare_kernel), the split-KV pass, and with more
// than one split the merge.
#define CFA_DECLARE_DECODE(family)                                  \
  namespace family {                                                \
  template <DType kDType, int kHeadDim>                             \
  void run_decode(const DecodeParams& params, cfaStream_t stream); \
  }
CFA_DECLARE_DECODE(mma_sync)
CFA_DECLARE_DECODE(cdna3)
#undef CFA_DECLARE_DECODE

// Runs the smallest built decoding instantiation whose head dim covers p.head_dim; false when this
// build has none.
inline bool launch_decode(KernelFamily family, DType dtype, const DecodeParams& p, cfaStream_t stream) {
  family = decode_family(family);
#define CFA_CASE(KIND, NS, FAMILY, DT, HD)                                        \
  if (family == KernelFamily::FAMILY && dtype == DType::DT && p.head_dim <= HD) { \
    NS::run_##KIND<DType::DT, HD>(p, stream);                                     \
    return true;                                                                  \
  }
#include "kernels/instantiations/cdna3/decode_dispatch.inc"
#include "kernels/instantiations/mma_sync/decode_dispatch.inc"
#undef CFA_CASE
  return false;
}
#endif

}  // namespace chiplet_fa
