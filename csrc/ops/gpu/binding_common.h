// The stream the CUDA/HIP bindings launch on (the rest of the binding is ops/kernel_binding.h,
// shared with the emulated CDNA3 path).
#pragma once
#include "platform.h"  // first: it defines CFA_HIP, which picks torch's stream header

#if defined(CFA_HIP)
#include <c10/hip/HIPStream.h>
#else
#include <c10/cuda/CUDAStream.h>
#endif

namespace chiplet_fa {

inline cfaStream_t current_stream() {
#if defined(CFA_HIP)
  return c10::hip::getCurrentHIPStream().stream();
#else
  return c10::cuda::getCurrentCUDAStream().stream();
#endif
}

}  // namespace chiplet_fa
