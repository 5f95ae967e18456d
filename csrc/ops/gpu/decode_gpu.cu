// CUDA / HIP implementation of chiplet_fa::fwd_kvcache and its registration: the decoding kernels
// of the family the device runs, on the device's stream (ops/decode_binding.h).
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>

#include "mapping/topology.h"
#include "ops/decode_binding.h"
#include "ops/decode_entry.h"
#include "ops/gpu/binding_common.h"
#include "ops/gpu/device_family.h"

namespace chiplet_fa {
namespace {

// Compute units (SMs, CUs) of the device: the split heuristic fills them.
int compute_units(int device) {
  int units = 0;
#if defined(CFA_HIP)
  check_runtime(hipDeviceGetAttribute(&units, hipDeviceAttributeMultiprocessorCount, device) == hipSuccess,
                  "chiplet_fa: cannot query cuda:", device);
#else
  check_runtime(cudaDeviceGetAttribute(&units, cudaDevAttrMultiProcessorCount, device) == cudaSuccess,
                  "chiplet_fa: cannot query cuda:", device);
#endif
  return units;
}

DecodeResult decode_gpu(const DecodeArgs& a) {
  check_decode(a);  // a mix with CPU tensors lands here: name it first
  const int device = a.q.get_device_index();
  const torch::stable::accelerator::DeviceGuard guard(device);
  return decode_with_kernels(a, kernel_family(device), detect_num_xcds(device), compute_units(device),
                             current_stream(device));
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(chiplet_fa, CUDA, m) {
  m.impl("fwd_kvcache", TORCH_BOX(&DecodeEntry<decode_gpu>::fwd_kvcache));
}

}  // namespace chiplet_fa
