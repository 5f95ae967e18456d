// CUDA / HIP implementation of chiplet_fa::fwd_kvcache and its registration: the decoding kernels
// of the family the device runs, on the device's stream (ops/decode_binding.h).
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "mapping/topology.h"
#include "ops/decode_binding.h"
#include "ops/decode_entry.h"
#include "ops/gpu/binding_common.h"
#include "ops/gpu/device_family.h"

namespace chiplet_fa {
namespace {

// Compute units (SMs, CUs) of the device: the split heuristic fills them.
int compute_units(const c10::Device& device) {
  int units = 0;
#if defined(CFA_HIP)
  TORCH_CHECK(hipDeviceGetAttribute(&units, hipDeviceAttributeMultiprocessorCount, device.index()) == hipSuccess,
              "chiplet_fa: cannot query ", device);
#else
  TORCH_CHECK(cudaDeviceGetAttribute(&units, cudaDevAttrMultiProcessorCount, device.index()) == cudaSuccess,
              "chiplet_fa: cannot query ", device);
#endif
  return units;
}

std::tuple<at::Tensor, at::Tensor> decode_gpu(const DecodeArgs& a) {
  check_decode(a);  // a mix with CPU tensors lands here: name it first
  const c10::DeviceGuard guard(a.q.device());
  return decode_with_kernels(a, kernel_family(a.q.device()), detect_num_xcds(a.q.device()),
                             compute_units(a.q.device()), current_stream());
}

}  // namespace

TORCH_LIBRARY_IMPL(chiplet_fa, CUDA, m) { m.impl("fwd_kvcache", &DecodeEntry<decode_gpu>::fwd_kvcache); }

}  // namespace chiplet_fa
