// CUDA / HIP implementation of chiplet_fa::fwd: the kernel family the device runs, on the
// device's stream, through the shared kernel binding (ops/kernel_binding.h).
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "mapping/topology.h"
#include "ops/gpu/binding_common.h"
#include "ops/gpu/kernel_family.h"
#include "ops/kernel_binding.h"

namespace chiplet_fa {
namespace {

std::tuple<at::Tensor, at::Tensor> fwd_gpu(const at::Tensor& q, const at::Tensor& k,
                                           const at::Tensor& v, std::optional<double> softmax_scale,
                                           bool causal, std::string mapping, int64_t num_xcds) {
  const c10::DeviceGuard guard(q.device());
  return fwd_with_kernels({q, k, v, softmax_scale, causal, mapping, num_xcds}, kernel_family(q.device()),
                          detect_num_xcds(q.device()), current_stream());
}

}  // namespace

TORCH_LIBRARY_IMPL(chiplet_fa, CUDA, m) { m.impl("fwd", &fwd_gpu); }

}  // namespace chiplet_fa
