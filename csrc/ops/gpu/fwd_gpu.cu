// CUDA / HIP implementation of chiplet_fa::fwd: a thin layer from tensors to FwdParams and the
// kernel family the device runs.
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "mapping/topology.h"
#include "ops/fwd_api.h"
#include "ops/gpu/binding_common.h"
#include "ops/gpu/kernel_family.h"
#include "ops/gpu/launch_kernels.h"

namespace chiplet_fa {
namespace {

std::tuple<at::Tensor, at::Tensor> fwd_gpu(const at::Tensor& q, const at::Tensor& k,
                                           const at::Tensor& v, std::optional<double> softmax_scale,
                                           bool causal, std::string mapping, int64_t num_xcds) {
  const c10::DeviceGuard guard(q.device());
  at::Tensor out, lse;
  const KernelFamily family = kernel_family(q.device());
  const int block_m = geometry(family).fwd_block_m;
  FwdParams p = prepare_fwd({q, k, v, softmax_scale, causal, mapping, num_xcds}, block_m,
                            detect_num_xcds(q.device()), out, lse);
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
  TORCH_CHECK(launch_kernels(family, dtype, causal, p, current_stream()), "chiplet_fa.fwd: no ",
              q.scalar_type(), " ", family_name(family), " kernel for head_dim ", q.size(3),
              " in this build (rebuild with CHIPLET_FA_DTYPES / CHIPLET_FA_HDIMS covering it)");
  check_launch("chiplet_fa.fwd");
  if (ok.data_ptr() != out.data_ptr()) out.copy_(ok.narrow(3, 0, q.size(3)));
  return {out, lse};
}

}  // namespace

TORCH_LIBRARY_IMPL(chiplet_fa, CUDA, m) { m.impl("fwd", &fwd_gpu); }

}  // namespace chiplet_fa
