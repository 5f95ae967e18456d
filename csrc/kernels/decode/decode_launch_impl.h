// Definition of run_decode (kernels/decode/decode_launch.h) for the unit's family; included only
// by the generated decoding units.
#pragma once
#include "kernels/decode/decode_kernel.h"
#include "kernels/decode/decode_launch.h"
#include "kernels/decode/decode_prepare.h"
#include "kernels/launch_impl.h"

namespace chiplet_fa::CFA_FAMILY {

template <DType kDType, int kHeadDim>
void run_decode(const DecodeParams& p, cfaStream_t stream) {
  using Kernel = DecodeKernel<kDType, kHeadDim>;
  using T = typename Kernel::T;
  static_assert(Kernel::kBlockM == kDecodeBlockM, "the binding sizes the grid with kDecodeBlockM");
  // A contiguous cache read whole, with nothing to append or rotate, has nothing to prepare or check.
  if (p.k_new || p.rotary_dim > 0 || p.cache_seqlens || p.cache_batch_idx || p.cache_leftpad || p.block_table)
    CFA_LAUNCH(decode_prepare_kernel<T>, dim3(unsigned(p.batch)), dim3(kPrepareThreads), 16, stream, p);
  const int64_t grid = grid_size(p.grid_shape());
  if (grid == 0) return;  // no query row (the appends are done)
  auto kernel = decode_kernel<kDType, kHeadDim>;
  allow_smem<Kernel::kSmemBytes>(kernel);
  CFA_LAUNCH(kernel, dim3(unsigned(grid)), dim3(Kernel::kThreads), Kernel::kSmemBytes, stream, p);
  if (p.num_splits == 1) return;
  const int64_t elems = int64_t(p.batch) * p.num_q_heads * p.seqlen_q * p.head_dim;
  const int64_t blocks = (elems + kCombineThreads - 1) / kCombineThreads;  // the out_accum this needs cannot be allocated past 2^31 blocks
  CFA_LAUNCH(decode_combine_kernel<T>, dim3(unsigned(blocks)), dim3(kCombineThreads), 0, stream, p);
}

}  // namespace chiplet_fa::CFA_FAMILY
