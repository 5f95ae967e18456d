// CUDA / HIP implementation of chiplet_fa::bwd and bwd_varlen, and their registration: the kernel
// family the device runs, on the device's stream, through the shared kernel binding
// (ops/kernel_binding.h). (The CUDA dispatch key also serves ROCm.)
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>

#include "mapping/topology.h"
#include "ops/gpu/binding_common.h"
#include "ops/gpu/device_family.h"
#include "ops/kernel_binding.h"

namespace chiplet_fa {

BwdResult bwd_gpu(const BwdArgs& a) {
  check_qkv(a.op(), a.q, a.k, a.v, a.varlen);  // a mix with CPU tensors lands here: name it first
  const int device = a.q.get_device_index();
  const torch::stable::accelerator::DeviceGuard guard(device);
  return bwd_with_kernels(a, kernel_family(device), detect_num_xcds(device), current_stream(device));
}

STABLE_TORCH_LIBRARY_IMPL(chiplet_fa, CUDA, m) { BwdOpEntry<bwd_gpu>::register_ops(m); }

}  // namespace chiplet_fa
