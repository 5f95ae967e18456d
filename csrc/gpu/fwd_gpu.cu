// CUDA / HIP implementation of chiplet_fa::fwd: a thin layer from tensors to FwdParams and
// the generated kernel instantiations.
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#if defined(CFA_HIP)
#include <c10/hip/HIPStream.h>
#else
#include <c10/cuda/CUDAStream.h>
#endif

#include "../fwd_api.h"
#include "../fwd_launch.h"
#include "../topology.h"

namespace chiplet_fa {
namespace {

cfaStream_t current_stream() {
#if defined(CFA_HIP)
  return c10::hip::getCurrentHIPStream().stream();
#else
  return c10::cuda::getCurrentCUDAStream().stream();
#endif
}

// Launches the smallest built instantiation whose head dim covers p.head_dim.
bool launch_fwd(DType dtype, bool causal, const FwdParams& p, cfaStream_t stream) {
  const int hdim = p.head_dim;
#define CFA_FWD_CASE(DT, HD)                                                     \
  if (dtype == DType::DT && hdim <= HD) {                                        \
    if (causal) run_fwd<DType::DT, HD, true>(p, stream);                         \
    else run_fwd<DType::DT, HD, false>(p, stream);                               \
    return true;                                                                 \
  }
#include "../instantiations/fwd_dispatch.inc"
#undef CFA_FWD_CASE
  return false;
}

// The kernels copy 16-byte pieces: base pointers and row/head/batch strides must be multiples
// of 8 elements and the head dim a multiple of 8. Other inputs get a zero-padded copy.
at::Tensor kernel_layout(const at::Tensor& t, int64_t head_dim8) {
  at::Tensor x = t.size(3) == head_dim8 ? t : at::constant_pad_nd(t, {0, head_dim8 - t.size(3)});
  const bool aligned = reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0 &&
                       x.stride(0) % 8 == 0 && x.stride(1) % 8 == 0 && x.stride(2) % 8 == 0;
  return aligned ? x : x.contiguous();
}

std::tuple<at::Tensor, at::Tensor> fwd_gpu(const at::Tensor& q, const at::Tensor& k,
                                           const at::Tensor& v, std::optional<double> softmax_scale,
                                           bool causal, std::string mapping, int64_t num_xcds) {
  const c10::DeviceGuard guard(q.device());
  at::Tensor out, lse;
  FwdParams p = prepare_fwd({q, k, v, softmax_scale, causal, mapping, num_xcds}, kGpuBlockM,
                            detect_num_xcds(q.device()), out, lse);
  const DType dtype = dtype_of(q);
  TORCH_CHECK_VALUE(dtype == DType::kFloat16 || dtype == DType::kBFloat16,
                    "chiplet_fa.fwd: GPU kernels take float16 or bfloat16 q/k/v, got ",
                    q.scalar_type(), " (float32/float64 run on the CPU path)");
  if (finish_without_kernel(p, out, lse)) return {out, lse};
  TORCH_CHECK_VALUE(grid_size(p.grid_shape()) <= INT32_MAX, "chiplet_fa.fwd: batch * num_heads * "
                    "ceil(seqlen_q / ", kGpuBlockM, ") must fit a 1-D grid (< 2^31)");

  const int64_t d8 = (q.size(3) + 7) / 8 * 8;
  const at::Tensor qk = kernel_layout(q, d8), kk = kernel_layout(k, d8), vk = kernel_layout(v, d8);
  const at::Tensor ok = d8 == q.size(3) ? out : at::empty({q.size(0), q.size(1), q.size(2), d8}, q.options());
  point_at(p, qk, kk, vk, ok);
  p.head_dim = int32_t(d8);
  TORCH_CHECK(launch_fwd(dtype, causal, p, current_stream()), "chiplet_fa.fwd: no ",
              q.scalar_type(), " kernel for head_dim ", q.size(3),
              " in this build (rebuild with CHIPLET_FA_DTYPES / CHIPLET_FA_HDIMS covering it)");
  const cfaError_t err = cfaGetLastError();
  TORCH_CHECK(err == cfaSuccess, "chiplet_fa.fwd: kernel launch failed: ", cfaGetErrorString(err));
  if (ok.data_ptr() != out.data_ptr()) out.copy_(ok.narrow(3, 0, q.size(3)));
  return {out, lse};
}

}  // namespace

TORCH_LIBRARY_IMPL(chiplet_fa, CUDA, m) { m.impl("fwd", &fwd_gpu); }

}  // namespace chiplet_fa
