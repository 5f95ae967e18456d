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
  int bwd_dq_block_m;  // query rows per workgroup of the deterministic dQ pass
  int bwd_row_pad;     // softmax_d and lse_log2 rows are padded to whole blocks of this many
  bool fwd_persistent;  // the forward runs persistent workers: FwdParams::tile_counters needed
};

// The sm90 forward is persistent.
constexpr KernelGeometry geometry(KernelFamily f) { return KernelGeometry{64, 64, f == KernelFamily::kSm90}; }

// Query rows per forward workgroup (fixes num_m_blocks for the mapping) for the instantiation at
// head_dim: the sm90 forward has three consumer warpgroups of 64 rows up to D = 64, two above
// (kernels/sm90/fwd_kernel.h).
constexpr int fwd_block_m(KernelFamily f, int head_dim) {
  return f == KernelFamily::kSm90 && head_dim <= 64 ? 192 : 128;
}

// Keys per workgroup of the backward main pass (fixes num_n_blocks) for the instantiation at
// head_dim: the sm90 backward gives each of its two consumer warpgroups 64 keys up to D = 128,
// and above shares 64 keys between them (kernels/sm90/bwd_kernel.h).
constexpr int bwd_block_n(KernelFamily f, int head_dim) {
  return f == KernelFamily::kSm90 && head_dim <= 128 ? 128 : 64;
}

// Whether a deterministic backward on family f is given BwdParams::dq_turns, to add dQ by ordered
// reductions instead of a separate dQ pass: the sm90 main pass, under a head-first order on one L2 domain, which
// dispatches each KV row's n-blocks in the order of the turns. (Orders swizzled over several
// domains interleave rows: a workgroup could wait for one not yet dispatched.)
inline bool orders_dq(KernelFamily f, const BwdParams& p) {
  const bool head_first = p.mapping == Mapping::kHeadFirst || (p.mapping == Mapping::kSwizzledHeadFirst && p.num_xcds <= 1);
  return f == KernelFamily::kSm90 && p.deterministic && head_first;
}

// Whether ordered dQ walks each workgroup's query blocks from the last with the group's query
// heads inner (BwdParams::dq_from_last) rather than head by head from the diagonal: under a mask
// and GQA where one KV head's Q, dO and fp32 dQ rows (G x N_q x D x 8 bytes) exceed half of L2.
// There, head by head leaves the resident workgroups spread over the group's heads and L2 misses
// most of their reads (bench/results/dq_order_model.md); elsewhere the diagonal-first order wins,
// because its turns do not chain (walking from the last lost 4-15% there, bench/results/ab_bwd_h200.md; at
// half of L2, b18, 32/8 N=8K and 64/8 N=4K causal gained 11-14%).
inline bool dq_walks_from_last(const BwdParams& p) {
  // Half of L2 (H100 50 MB, H200 60 MB): the rows share it with K, V and the other heads' traffic.
  constexpr int64_t kL2Bytes = int64_t(25) << 20;
  const int64_t rows_bytes = int64_t(p.group_size()) * p.seqlen_q * p.head_dim * 8;
  return p.dq_turns && p.windowed && p.group_size() > 1 && rows_bytes > kL2Bytes;
}

#if defined(CFA_CUDA) || defined(CFA_HIP) || defined(CFA_EMULATE)
// run_bwd: preprocess, main pass (atomic or ordered dQ, or none when deterministic without
// dq_turns) and then the dQ pass.
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
