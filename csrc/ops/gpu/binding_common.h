// Pieces shared by the CUDA/HIP bindings of the forward and backward ops.
#pragma once
#include <cstdint>

#include <ATen/ATen.h>

#if defined(CFA_HIP)
#include <c10/hip/HIPStream.h>
#else
#include <c10/cuda/CUDAStream.h>
#endif

#include "arch/dtype.h"
#include "ops/fwd_api.h"
#include "platform.h"

namespace chiplet_fa {

inline cfaStream_t current_stream() {
#if defined(CFA_HIP)
  return c10::hip::getCurrentHIPStream().stream();
#else
  return c10::cuda::getCurrentCUDAStream().stream();
#endif
}

// The kernels copy 16-byte pieces: base pointers and every stride but the last dimension's must
// be multiples of 8 elements and the head dim a multiple of 8. Other inputs get a zero-padded copy.
inline at::Tensor kernel_layout(const at::Tensor& t, int64_t head_dim8) {
  at::Tensor x = t.size(-1) == head_dim8 ? t : at::constant_pad_nd(t, {0, head_dim8 - t.size(-1)});
  bool aligned = reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) aligned &= x.stride(d) % 8 == 0;
  return aligned ? x : x.contiguous();
}

// An uninitialised tensor like t with the head dim (last dimension) padded to head_dim8.
inline at::Tensor padded_like(const at::Tensor& t, int64_t head_dim8) {
  std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
  shape.back() = head_dim8;
  return at::empty(shape, t.options());
}

// The device buffer a packed batch's ragged grid is written to by the launch code (batch + 1
// int32), undefined for a dense batch.
inline at::Tensor ragged_grid(const int32_t* cu_seqlens, int32_t batch, const at::Tensor& like) {
  return cu_seqlens ? at::empty({int64_t(batch) + 1}, like.options().dtype(at::kInt)) : at::Tensor();
}

inline DType check_gpu_dtype(const char* op, const at::Tensor& q) {
  const DType dtype = dtype_of(q);
  TORCH_CHECK_VALUE(dtype == DType::kFloat16 || dtype == DType::kBFloat16, op,
                    ": GPU kernels take float16 or bfloat16 tensors, got ", q.scalar_type(),
                    " (float32/float64 run on the CPU path)");
  return dtype;
}

// A launch failure reported by the runtime, as a RuntimeError naming the op.
inline void check_launch(const char* op) {
  const cfaError_t err = cfaGetLastError();
  TORCH_CHECK(err == cfaSuccess, op, ": kernel launch failed: ", cfaGetErrorString(err));
}

}  // namespace chiplet_fa
