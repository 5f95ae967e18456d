// The stream the CUDA/HIP bindings launch on (the rest of the binding is ops/kernel_binding.h,
// shared with the emulated CDNA3 path).
#pragma once
#include <cstdint>

#include <torch/csrc/inductor/aoti_torch/c/shim.h>

#include "ops/stable_tensor.h"
#include "platform.h"

// torch 2.11's device-generic stream (torch::stable::accelerator::getCurrentStream) gives only the
// stream's id; its native handle came in torch 2.13 (Stream::nativeHandle). So the stream comes from
// the CUDA shim's C entry point (libtorch_cuda; libtorch_hip in a ROCm torch, where it returns the
// hipStream_t), which shim.h declares only under USE_CUDA.
extern "C" AOTITorchError aoti_torch_get_current_cuda_stream(int32_t device_index, void** ret_stream);

namespace chiplet_fa {

inline cfaStream_t current_stream(int device_index) {
  void* stream = nullptr;
  TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(device_index, &stream));
  return static_cast<cfaStream_t>(stream);
}

}  // namespace chiplet_fa
