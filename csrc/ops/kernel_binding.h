// The kernel half of the fwd and bwd bindings, shared by the GPU bindings (ops/gpu/) and the
// emulated CDNA3 path of a CPU build (ops/emulated/): from the op's arguments to params for the
// family's geometry, the head dim padded to a multiple of 8 (the kernels copy 16-byte pieces),
// the family's kernels launched on `stream`, and the results copied back. Compiled as CUDA, HIP
// or (emulated) host C++: every family's launchers are declared for all three.
#pragma once
#include <cstdint>
#include <tuple>

#include <ATen/ATen.h>

#include "kernels/launch.h"
#include "ops/bwd_api.h"
#include "ops/fwd_api.h"
#include "ops/gpu/launch_kernels.h"
#include "platform.h"

namespace chiplet_fa {

// The kernels copy 16-byte pieces: base pointers and row/head/batch strides must be multiples
// of 8 elements and the head dim a multiple of 8. Other inputs get a zero-padded copy.
inline at::Tensor kernel_layout(const at::Tensor& t, int64_t head_dim8) {
  at::Tensor x = t.size(3) == head_dim8 ? t : at::constant_pad_nd(t, {0, head_dim8 - t.size(3)});
  const bool aligned = reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0 &&
                       x.stride(0) % 8 == 0 && x.stride(1) % 8 == 0 && x.stride(2) % 8 == 0;
  return aligned ? x : x.contiguous();
}

// A launch failure reported by the GPU runtime, as a RuntimeError naming the op (the emulator
// raises its errors from the launch itself).
inline void check_launch(const char* op) {
#if defined(CFA_CUDA) || defined(CFA_HIP)
  const cfaError_t err = cfaGetLastError();
  TORCH_CHECK(err == cfaSuccess, op, ": kernel launch failed: ", cfaGetErrorString(err));
#else
  (void)op;
#endif
}

// chiplet_fa::fwd on `family`'s kernels, with num_xcds=-1 meaning `detected_xcds`.
inline std::tuple<at::Tensor, at::Tensor> fwd_with_kernels(const FwdArgs& a, KernelFamily family, int detected_xcds,
                                                           cfaStream_t stream) {
  const at::Tensor &q = a.q, &k = a.k, &v = a.v;
  at::Tensor out, lse;
  const int block_m = geometry(family).fwd_block_m;
  FwdParams p = prepare_fwd(a, block_m, detected_xcds, out, lse);
  const DType dtype = dtype_of(q);
  TORCH_CHECK_VALUE(dtype == DType::kFloat16 || dtype == DType::kBFloat16,
                    "chiplet_fa.fwd: GPU kernels take float16 or bfloat16 q/k/v, got ",
                    q.scalar_type(), " (float32/float64 run on the CPU path)");
  if (finish_without_kernel(p, out, lse)) return {out, lse};
  TORCH_CHECK_VALUE(grid_size(p.grid_shape()) <= INT32_MAX, "chiplet_fa.fwd: batch * num_heads * "
                    "ceil(seqlen_q / ", block_m, ") must fit a 1-D grid (< 2^31)");

  const int64_t d8 = (q.size(3) + 7) / 8 * 8;
  const at::Tensor qk = kernel_layout(q, d8), kk = kernel_layout(k, d8), vk = kernel_layout(v, d8);
  const at::Tensor ok = d8 == q.size(3) ? out : at::empty({q.size(0), q.size(1), q.size(2), d8}, q.options());
  point_at(p, qk, kk, vk, ok);
  p.head_dim = int32_t(d8);
  TORCH_CHECK(launch_kernels(family, dtype, a.causal, p, stream), "chiplet_fa.fwd: no ",
              q.scalar_type(), " ", family_name(family), " kernel for head_dim ", q.size(3),
              " in this build (rebuild with CHIPLET_FA_DTYPES / CHIPLET_FA_HDIMS covering it)");
  check_launch("chiplet_fa.fwd");
  if (ok.data_ptr() != out.data_ptr()) out.copy_(ok.narrow(3, 0, q.size(3)));
  return {out, lse};
}

// chiplet_fa::bwd on `family`'s kernels, with num_xcds=-1 meaning `detected_xcds`.
inline std::tuple<at::Tensor, at::Tensor, at::Tensor> bwd_with_kernels(const BwdArgs& args, KernelFamily family,
                                                                       int detected_xcds, cfaStream_t stream) {
  const at::Tensor &q = args.q, &k = args.k, &v = args.v;
  BwdTensors t;
  const KernelGeometry g = geometry(family);
  BwdParams p = prepare_bwd(args, g.bwd_dq_block_m, g.bwd_block_n, g.bwd_row_pad, detected_xcds, t);
  const DType dtype = dtype_of(q);
  TORCH_CHECK_VALUE(dtype == DType::kFloat16 || dtype == DType::kBFloat16,
                    "chiplet_fa.bwd: GPU kernels take float16 or bfloat16 tensors, got ",
                    q.scalar_type(), " (float32/float64 run on the CPU path)");
  TORCH_CHECK_VALUE(q.size(3) <= 128, "chiplet_fa.bwd: the GPU backward supports head_dim up to "
                    "128, got ", q.size(3));
  if (q.numel() == 0 || k.numel() == 0) {  // no query or no key: every gradient is zero
    t.dk.zero_();
    t.dv.zero_();
    return {at::zeros_like(q), t.dk, t.dv};
  }
  TORCH_CHECK_VALUE(grid_size(p.grid_shape()) <= INT32_MAX && grid_size(p.kv_grid_shape()) <= INT32_MAX,
                    "chiplet_fa.bwd: the workgroup grids must fit a 1-D grid (< 2^31)");

  const int64_t D = q.size(3), d8 = (D + 7) / 8 * 8;
  const at::Tensor qk = kernel_layout(q, d8), kk = kernel_layout(k, d8), vk = kernel_layout(v, d8);
  const at::Tensor ok = kernel_layout(args.out, d8), dok = kernel_layout(args.dout, d8);
  const bool padded = d8 != D;
  const at::Tensor dk = padded ? at::empty({k.size(0), k.size(1), k.size(2), d8}, k.options()) : t.dk;
  const at::Tensor dv = padded ? at::empty({v.size(0), v.size(1), v.size(2), d8}, v.options()) : t.dv;
  const at::Tensor dq_accum = padded ? at::zeros({q.size(0), q.size(1), q.size(2), d8},
                                                 q.options().dtype(at::kFloat))
                                     : t.dq_accum;
  const at::Tensor lse_log2 = at::empty_like(t.softmax_d);
  p.lse_log2 = lse_log2.data_ptr<float>();
  point_at(p, qk, kk, vk, ok);
  point_grads_at(p, dok, dk, dv, dq_accum);
  p.head_dim = int32_t(d8);
  TORCH_CHECK(launch_kernels(family, dtype, args.causal, p, stream), "chiplet_fa.bwd: no ",
              q.scalar_type(), " ", family_name(family), " kernel for head_dim ", D,
              " in this build (rebuild with CHIPLET_FA_DTYPES / CHIPLET_FA_HDIMS covering it)");
  check_launch("chiplet_fa.bwd");
  if (!padded) return {t.dq_accum.to(q.scalar_type()), t.dk, t.dv};
  t.dk.copy_(dk.narrow(3, 0, D));
  t.dv.copy_(dv.narrow(3, 0, D));
  return {dq_accum.narrow(3, 0, D).to(q.scalar_type()), t.dk, t.dv};
}

}  // namespace chiplet_fa
