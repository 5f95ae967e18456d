// CUDA / HIP implementation of chiplet_fa::bwd: the kernel family the device runs, on the
// device's stream, through the shared kernel binding (ops/kernel_binding.h).
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "mapping/topology.h"
#include "ops/gpu/binding_common.h"
#include "ops/gpu/kernel_family.h"
#include "ops/kernel_binding.h"

namespace chiplet_fa {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> bwd_gpu(
    const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& out, const at::Tensor& softmax_lse, std::optional<double> softmax_scale,
    bool causal, std::string mapping, int64_t num_xcds, bool deterministic) {
  const c10::DeviceGuard guard(q.device());
  return bwd_with_kernels({dout, q, k, v, out, softmax_lse, softmax_scale, causal, mapping, num_xcds, deterministic},
                          kernel_family(q.device()), detect_num_xcds(q.device()), current_stream());
}

}  // namespace

TORCH_LIBRARY_IMPL(chiplet_fa, CUDA, m) { m.impl("bwd", &bwd_gpu); }

}  // namespace chiplet_fa
