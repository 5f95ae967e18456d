// Definitions of the entry points kernels/launch.h declares, for the unit's family; included only
// by the generated instantiation units.
#pragma once
#include "arch/family.h"
#include "kernels/bwd_kernel.h"
#if defined(CFA_FAMILY_SM90)
#include "kernels/sm90/bwd_kernel_sm90.h"
#include "kernels/sm90/fwd_kernel_sm90.h"
#include "kernels/sm90/tile_scheduler.h"
#else
#include "kernels/fwd_kernel.h"
#endif
#include "kernels/launch.h"
#include "kernels/varlen.h"

namespace chiplet_fa::CFA_FAMILY {

// A pass's ragged grid of a packed batch, from cu_seqlens on the device (no host sync); kernels
// launched after it in the stream read it. A cu_seqlens that is not a packing of its rows stops
// the device before any kernel reads outside the tensors.
// static: one copy per unit (every instantiation unit of the family includes it).
static CFA_GLOBAL void block_offsets_kernel(const int32_t* cu_seqlens, int32_t batch, int64_t total, int32_t max_len,
                                            int32_t block, int32_t* offsets, bool keys) {
  if (threadIdx.x == 0 && !fill_block_offsets(cu_seqlens, batch, total, max_len, block, offsets))
    device_fail(keys ? "cu_seqlens_k is not a packing of k's rows into sequences of at most max_seqlen_k"
                     : "cu_seqlens_q is not a packing of q's rows into sequences of at most max_seqlen_q");
}

inline void fill_grid(const int32_t* cu_seqlens, int32_t batch, int64_t total, int32_t max_len, int32_t block,
                      int32_t* offsets, bool keys, cfaStream_t stream) {
  if (offsets) CFA_LAUNCH(block_offsets_kernel, dim3(1), dim3(32), 0, stream, cu_seqlens, batch, total, max_len, block,
                          offsets, keys);
}

// Above 48 KB a kernel must opt in to dynamic shared memory on NVIDIA; the attribute is per
// function, not a stream operation, so this is safe under CUDA-graph capture. AMD has no opt-in
// beyond the per-workgroup LDS size (64 KB on gfx942), which every cdna3 tile must fit.
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

// The sm90 kernels come in a plain variant (no softcap, no ALiBi, a positive scale: the registers and instruction
// footprint of a loop without them); the other families apply both at run time.
constexpr bool kPlainVariants = kFamily == KernelFamily::kSm90;
inline bool plain_scores(const FwdParams& p) { return p.softcap == 0.f && !p.alibi_slopes && p.softmax_scale > 0; }

// Every forward launch first: the kernel's shared memory allowed, a packed batch's ragged grid
// filled in; returns the grid's size in tiles.
template <typename Fwd, typename Kernel>
int64_t prepare_fwd_launch(Kernel kernel, const FwdParams& p, cfaStream_t stream) {
  allow_smem<Fwd::kSmemBytes>(kernel);
  fill_grid(p.cu_seqlens_q, p.batch, p.total_q, p.seqlen_q, Fwd::kBlockM, p.block_offsets, false, stream);
  return p.launch_size(p.grid_shape(), p.total_q, Fwd::kBlockM);
}

#if defined(CFA_FAMILY_SM90)
// The sm90 forward runs persistent workers (at most one per SM; kernels/sm90/tile_scheduler.h) with
// TMA descriptions of q, k, v.
template <DType kDType, int kHeadDim, bool kWindowed, bool kPlain>
void launch_fwd(const FwdParams& p, cfaStream_t stream) {
  using Fwd = FwdKernelSm90<kDType, kHeadDim, kWindowed, kPlain>;
  static_assert(Fwd::kBlockM == fwd_block_m(kFamily, kHeadDim), "the binding sizes the grid with fwd_block_m");
  auto kernel = fwd_kernel_sm90<kDType, kHeadDim, kWindowed, kPlain>;
  const int64_t grid = prepare_fwd_launch<Fwd>(kernel, p, stream);
  FwdParams q = p;
  const int64_t workers = FwdTileScheduler<Fwd>::prepare(q, grid, stream);
  TmaFwdParams args = with_tensor_maps(q, kDType == DType::kBFloat16, Fwd::kBlockM, Fwd::kBlockN);
  if constexpr (kTrace) args.trace = trace_sink();
  CFA_LAUNCH(kernel, dim3(unsigned(workers)), dim3(Fwd::kThreads), Fwd::kSmemBytes, stream, args);
}
#else
// The other families run one workgroup per tile with the params alone.
template <DType kDType, int kHeadDim, bool kWindowed, bool kPlain>
void launch_fwd(const FwdParams& p, cfaStream_t stream) {
  using Fwd = FwdKernel<kDType, kHeadDim, kWindowed, kPlain>;
  static_assert(Fwd::kBlockM == fwd_block_m(kFamily, kHeadDim), "the binding sizes the grid with fwd_block_m");
  auto kernel = fwd_kernel<kDType, kHeadDim, kWindowed, kPlain>;
  const int64_t grid = prepare_fwd_launch<Fwd>(kernel, p, stream);
  CFA_LAUNCH(kernel, dim3(unsigned(grid)), dim3(Fwd::kThreads), Fwd::kSmemBytes, stream, p);
}
#endif

template <DType kDType, int kHeadDim, bool kWindowed>
void run_fwd(const FwdParams& p, cfaStream_t stream) {
  if constexpr (kPlainVariants) {
    if (plain_scores(p)) return launch_fwd<kDType, kHeadDim, kWindowed, true>(p, stream);
  }
  launch_fwd<kDType, kHeadDim, kWindowed, false>(p, stream);
}

// The backward's main (KV-block) pass: warp-specialised in the sm90 family, generic elsewhere.
template <typename Kv, typename Kernel, typename Args>
void launch_main_pass(Kernel kernel, const BwdParams& p, const Args& args, cfaStream_t stream) {
  static_assert(Kv::kBlockN == bwd_block_n(kFamily, Kv::kDim), "the binding sizes the grid with bwd_block_n");
  allow_smem<Kv::kSmemBytes>(kernel);
  const int64_t grid = p.launch_size(p.kv_grid_shape(), p.total_k, Kv::kBlockN);
  CFA_LAUNCH(kernel, dim3(unsigned(grid)), dim3(Kv::kThreads), Kv::kSmemBytes, stream, args);
}

// Whether the main pass adds a deterministic dQ (in fixed point, BwdParams::dq_scale) when asked:
// the sm90 kernel (every head dim it is built for). Otherwise a deterministic backward takes the
// dQ pass, whatever the binding allocated.
constexpr bool kFixedDqInMainPass = kFamily == KernelFamily::kSm90;

#if defined(CFA_FAMILY_SM90)
// Workgroups of `kernel` resident on the current device at once (0: unknown).
template <typename Kv, typename Kernel>
int64_t resident_workgroups(Kernel kernel) {
  return per_device([kernel](int) {
    allow_smem<Kv::kSmemBytes>(kernel);  // the query counts blocks of kSmemBytes only once they are allowed
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Kv::kThreads, Kv::kSmemBytes) != cudaSuccess)
      per_sm = 0;
    return int64_t(per_sm) * device_counts().sms;
  });
}

template <DType kDType, int kHeadDim, bool kWindowed, DqMode kDq, bool kPlain>
void launch_bwd_kv_sm90(const BwdParams& p, cfaStream_t stream) {
  using Kv = BwdKvKernelSm90<kDType, kHeadDim, kWindowed, kDq, kPlain>;
  auto kernel = bwd_kv_kernel_sm90<kDType, kHeadDim, kWindowed, kDq, kPlain>;
  const BwdParams q = with_kv_sections(p, resident_workgroups<Kv>(kernel), int(sizeof(typename Kv::T)));
  TmaBwdParams args = with_tensor_maps(q, kDType == DType::kBFloat16, Kv::kAddsDq, Kv::kBlockM);
  if constexpr (kTrace) args.trace = trace_sink();
  launch_main_pass<Kv>(kernel, q, args, stream);
}
#endif

template <DType kDType, int kHeadDim, bool kWindowed, bool kAtomicDq, bool kPlain>
void launch_bwd_kv(const BwdParams& p, cfaStream_t stream) {
#if defined(CFA_FAMILY_SM90)
  if constexpr (kAtomicDq) {
    if (p.dq_scale) return launch_bwd_kv_sm90<kDType, kHeadDim, kWindowed, DqMode::kFixed, kPlain>(p, stream);
  }
  launch_bwd_kv_sm90<kDType, kHeadDim, kWindowed, kAtomicDq ? DqMode::kAtomic : DqMode::kSeparatePass, kPlain>(p, stream);
#else
  using Kv = BwdConfig<kDType, kHeadDim>;
  launch_main_pass<Kv>(bwd_kv_kernel<kDType, kHeadDim, kWindowed, kAtomicDq>, p, p, stream);
#endif
}

template <DType kDType, int kHeadDim, bool kWindowed, bool kAtomicDq>
void run_bwd_kv(const BwdParams& p, cfaStream_t stream) {
  if constexpr (kPlainVariants) {
    if (plain_scores(p)) return launch_bwd_kv<kDType, kHeadDim, kWindowed, kAtomicDq, true>(p, stream);
  }
  launch_bwd_kv<kDType, kHeadDim, kWindowed, kAtomicDq, false>(p, stream);
}

template <DType kDType, int kHeadDim, bool kWindowed>
void run_bwd(const BwdParams& p, cfaStream_t stream) {
  using T = typename arch::Element<kDType>::type;
  using Dq = BwdDqConfig<kDType, kHeadDim>;
  fill_grid(p.cu_seqlens_q, p.batch, p.total_q, p.seqlen_q, Dq::kBlockM, p.block_offsets, false, stream);
  fill_grid(p.cu_seqlens_k, p.batch, p.total_k, p.seqlen_k, p.block_n, p.kv_block_offsets, true, stream);
  const dim3 row_grid(unsigned(p.row_pass_blocks()));  // the binding checks it fits
  CFA_LAUNCH(bwd_preprocess_kernel<T>, row_grid, dim3(BwdParams::kRowThreads), 0, stream, p);
  // The generic kernels take head dims above 128 in column slices (bwd_slices), a launch each;
  // sm90's main pass takes them whole.
  const bool dq_pass = p.deterministic && !(p.dq_scale && kFixedDqInMainPass);
  constexpr int kMainSlice = kFamily == KernelFamily::kSm90 ? kHeadDim : bwd_slice_dim(kHeadDim);
  for (BwdParams slice = p; slice.slice_col0 < p.head_dim; slice.slice_col0 += kMainSlice) {
    if (dq_pass) run_bwd_kv<kDType, kHeadDim, kWindowed, false>(slice, stream);
    else run_bwd_kv<kDType, kHeadDim, kWindowed, true>(slice, stream);
  }
  if (p.dq_scale && !dq_pass)
    CFA_LAUNCH(bwd_dq_fixed_kernel<T>, row_grid, dim3(BwdParams::kRowThreads), 0, stream, p);
  if (!dq_pass) return;
  auto dq = bwd_dq_kernel<kDType, kHeadDim, kWindowed>;
  allow_smem<Dq::kSmemBytes>(dq);
  const int64_t grid = p.launch_size(p.grid_shape(), p.total_q, Dq::kBlockM);
  for (BwdParams slice = p; slice.slice_col0 < p.head_dim; slice.slice_col0 += bwd_slice_dim(kHeadDim))
    CFA_LAUNCH(dq, dim3(unsigned(grid)), dim3(Dq::kThreads), Dq::kSmemBytes, stream, slice);
}

}  // namespace chiplet_fa::CFA_FAMILY
