// Host entry points of the GPU kernels, one generated translation unit per (family, dtype, head
// dim, causal) in kernels/instantiations/<family>/, so builds parallelise. The bindings
// (ops/gpu/) call the family the device runs; this header declares every family's entry points
// and the launch geometry each fixes for the host.
#pragma once
#include "arch/kernel_family.h"
#include "kernels/bwd_params.h"
#include "platform.h"

namespace chiplet_fa {

struct KernelGeometry {
  int bwd_row_pad;     // softmax_d and lse_log2 rows are padded to whole blocks of this many
  bool fwd_persistent;  // the forward runs persistent workers: FwdParams::tile_counters needed
};

// The sm90 forward is persistent.
constexpr KernelGeometry geometry(KernelFamily f) { return KernelGeometry{64, f == KernelFamily::kSm90}; }

// The tiles below, per instantiation head dim, fix the grids the host sizes. cdna3 above D = 128:
// gfx942 gives a workgroup 64 KB of LDS, which the generic kernels' tiles at those widths only
// fit with half the rows or keys (their LDS bytes: kernels/fwd_kernel.h, bwd_kernel.h).
constexpr bool cdna3_wide(KernelFamily f, int head_dim) { return f == KernelFamily::kCdna3 && head_dim > 128; }

// Query rows per forward workgroup (fixes num_m_blocks for the mapping): the sm90 forward has
// three consumer warpgroups of 64 rows up to D = 64, two above (kernels/sm90/fwd_kernel_sm90.h).
constexpr int fwd_block_m(KernelFamily f, int head_dim) {
  return f == KernelFamily::kSm90 && head_dim <= 64 ? 192 : cdna3_wide(f, head_dim) ? 64 : 128;
}

// Keys per workgroup of the backward main pass (fixes num_n_blocks): the sm90 backward gives each
// of its two consumer warpgroups 64 keys up to D = 128, and above shares 64 keys between them
// (kernels/sm90/bwd_kernel_sm90.h).
constexpr int bwd_block_n(KernelFamily f, int head_dim) {
  return f == KernelFamily::kSm90 && head_dim <= 128 ? 128 : cdna3_wide(f, head_dim) ? 32 : 64;
}

// Query rows per workgroup of the deterministic dQ pass (the families other than sm90).
constexpr int bwd_dq_block_m(KernelFamily f, int head_dim) { return cdna3_wide(f, head_dim) ? 32 : 64; }

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
