// The kernel half of the fwd_kvcache binding, shared by the GPU binding (ops/gpu/decode_gpu.cu) and
// the emulated CDNA3 path of a CPU build: checks the kernels need, outputs and split scratch from
// the caching allocator, the split count, and the family's decoding launch on `stream`. No host
// synchronisation and no allocation sized by a device value, so a decoding step can be captured
// in a CUDA graph.
#pragma once
#include <cstdint>
#include <tuple>

#include "kernels/decode/decode_launch.h"
#include "ops/decode_api.h"
#include "ops/kernel_binding.h"

namespace chiplet_fa {

// The cache is written in place and copied in 16-byte pieces: no padded copy can stand in for it.
inline bool cache_layout_ok(const Tensor& t) {
  bool ok = reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0 && t.size(-1) % 8 == 0;
  for (int64_t d = 0; d + 1 < t.dim(); ++d) ok &= t.stride(d) % 8 == 0;
  return ok;
}

inline std::tuple<Tensor, Tensor> decode_with_kernels(DecodeArgs a, KernelFamily family, int detected_xcds,
                                                              int compute_units, cfaStream_t stream) {
  const char* op = DecodeArgs::kOp;
  const DecodeDims d = check_decode(a);
  const DType dtype = check_kernel_dtype(op, a.q);
  check_value(cache_layout_ok(a.k_cache) && cache_layout_ok(a.v_cache), op,
              ": the GPU kernels read and write the cache in 16-byte pieces: head_dim must be a multiple of 8 "
              "and k_cache/v_cache 16-byte aligned with strides in multiples of 8 elements, got head_dim ",
              d.head_dim, " and strides ", a.k_cache.strides(), " / ", a.v_cache.strides());
  // The rotated copy of q is dense; the kernels read it with q's strides, so q is made dense too.
  a.q = d.rotary_dim > 0 ? torch::stable::contiguous(a.q) : kernel_layout(a.q, d.head_dim);
  DecodeParams p = decode_params(a, d, detected_xcds);
  p.block_m = kDecodeBlockM;
  Tensor out = empty_on(a.q, a.q.sizes(), a.q.scalar_type());
  Tensor lse = empty_on(a.q, {d.batch, d.num_q_heads, d.seqlen_q}, ScalarType::Float);
  p.out = out.data_ptr();
  p.o_batch_stride = out.stride(0); p.o_row_stride = out.stride(1); p.o_head_stride = out.stride(2);
  p.softmax_lse = lse.mutable_data_ptr<float>();
  const int64_t tiles = int64_t(d.batch) * p.head_groups() * p.row_blocks();
  p.num_splits = decode_splits(a, d, tiles, compute_units, 64);
  check_value(tiles * p.num_splits <= INT32_MAX, op, ": ", tiles * p.num_splits,
              " workgroups (batch x head groups x row blocks x splits) exceed the launch grid's 2^31 - 1");
  Tensor q_rotated, out_accum, lse_accum;
  if (d.rotary_dim > 0) {
    q_rotated = torch::stable::empty_like(a.q);
    p.q_rotated = q_rotated.data_ptr();
  }
  if (p.num_splits > 1) {
    out_accum = empty_on(lse, {p.num_splits, d.batch, d.num_q_heads, d.seqlen_q, d.head_dim}, ScalarType::Float);
    lse_accum = empty_on(lse, {p.num_splits, d.batch, d.num_q_heads, d.seqlen_q}, ScalarType::Float);
    p.out_accum = out_accum.mutable_data_ptr<float>();
    p.lse_accum = lse_accum.mutable_data_ptr<float>();
  }
  if (d.batch == 0) return {out, lse};
  check_runtime(launch_decode(family, dtype, p, stream), op, ": no ", a.q.scalar_type(), " ",
                family_name(decode_family(family)), " decoding kernel for head_dim ", d.head_dim,
                " in this build (rebuild with CHIPLET_FA_DTYPES / CHIPLET_FA_HDIMS covering it)");
  check_launch(op);
  return {out, lse};
}

}  // namespace chiplet_fa
