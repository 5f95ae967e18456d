// Pieces shared by the CUDA/HIP bindings of fwd and bwd.
#pragma once
#include <cstdint>

#include <ATen/ATen.h>

#if defined(CFA_HIP)
#include <c10/hip/HIPStream.h>
#else
#include <c10/cuda/CUDAStream.h>
#endif

#include "platform.h"

namespace chiplet_fa {

inline cfaStream_t current_stream() {
#if defined(CFA_HIP)
  return c10::hip::getCurrentHIPStream().stream();
#else
  return c10::cuda::getCurrentCUDAStream().stream();
#endif
}

// The kernels copy 16-byte pieces: base pointers and row/head/batch strides must be multiples
// of 8 elements and the head dim a multiple of 8. Other inputs get a zero-padded copy.
inline at::Tensor kernel_layout(const at::Tensor& t, int64_t head_dim8) {
  at::Tensor x = t.size(3) == head_dim8 ? t : at::constant_pad_nd(t, {0, head_dim8 - t.size(3)});
  const bool aligned = reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0 &&
                       x.stride(0) % 8 == 0 && x.stride(1) % 8 == 0 && x.stride(2) % 8 == 0;
  return aligned ? x : x.contiguous();
}

// A launch failure reported by the runtime, as a RuntimeError naming the op.
inline void check_launch(const char* op) {
  const cfaError_t err = cfaGetLastError();
  TORCH_CHECK(err == cfaSuccess, op, ": kernel launch failed: ", cfaGetErrorString(err));
}

}  // namespace chiplet_fa
