// CUDA / HIP implementation of chiplet_fa::fwd and fwd_varlen, and their registration: the kernel
// family the device runs, on the device's stream, through the shared kernel binding
// (ops/kernel_binding.h). (The CUDA dispatch key also serves ROCm.)
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>

#include "mapping/topology.h"
#include "ops/gpu/binding_common.h"
#include "ops/gpu/device_family.h"
#include "ops/kernel_binding.h"

namespace chiplet_fa {

FwdResult fwd_gpu(const FwdArgs& a, const OptTensor& given_out) {
  check_qkv(a.op(), a.q, a.k, a.v, a.varlen);  // a mix with CPU tensors lands here: name it first
  const int device = a.q.get_device_index();
  const torch::stable::accelerator::DeviceGuard guard(device);
  return fwd_with_kernels(a, given_out, kernel_family(device), detect_num_xcds(device), current_stream(device));
}

int fwd_tile_rows(DType dtype, int64_t head_dim, int device_index) {
  return fwd_rows_for(kernel_family(device_index), dtype, head_dim);
}

STABLE_TORCH_LIBRARY_IMPL(chiplet_fa, CUDA, m) { FwdOpEntry<fwd_gpu>::register_ops(m); }

}  // namespace chiplet_fa
