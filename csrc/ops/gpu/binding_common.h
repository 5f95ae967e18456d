// The stream the CUDA/HIP bindings launch on (the rest of the binding is ops/kernel_binding.h,
// shared with the emulated CDNA3 path).
#pragma once
#include <dlfcn.h>

#include <cstdint>

#include <torch/csrc/inductor/aoti_torch/c/shim.h>

#include "ops/stable_tensor.h"
#include "platform.h"

namespace chiplet_fa {

// torch 2.11's device-generic stream (torch::stable::accelerator::getCurrentStream) gives only the
// stream's id; its native handle came in torch 2.13 (Stream::nativeHandle). So the stream comes from
// the CUDA shim's C function, aoti_torch_get_current_cuda_stream (libtorch_cuda; libtorch_hip in a
// ROCm torch, where it returns the hipStream_t), found in the library torch has already loaded
// rather than linked: a dependency on libtorch_cuda would keep the module from loading under a
// CPU-only torch, whose CPU path the same wheel serves.
using CurrentStreamFn = AOTITorchError (*)(int32_t device_index, void** ret_stream);

inline CurrentStreamFn current_stream_fn() {
  static const CurrentStreamFn fn = [] {
    for (const char* library : {"libtorch_cuda.so", "libtorch_hip.so"})
      if (void* handle = dlopen(library, RTLD_NOW | RTLD_NOLOAD))
        if (void* f = dlsym(handle, "aoti_torch_get_current_cuda_stream")) return reinterpret_cast<CurrentStreamFn>(f);
    return CurrentStreamFn{nullptr};
  }();
  check_runtime(fn != nullptr, "chiplet_fa: the torch in this process has no CUDA or ROCm library loaded "
                "(libtorch_cuda.so / libtorch_hip.so) to take the current stream from: a CPU-only torch runs "
                "the CPU path alone");
  return fn;
}

inline cfaStream_t current_stream(int device_index) {
  void* stream = nullptr;
  TORCH_ERROR_CODE_CHECK(current_stream_fn()(device_index, &stream));
  return static_cast<cfaStream_t>(stream);
}

}  // namespace chiplet_fa
