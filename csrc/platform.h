// Platform layer: one spelling for host/device qualifiers and the few runtime calls the
// kernels need, whether this translation unit is compiled by nvcc, by clang as HIP, or by a
// plain host compiler (CPU path, pybind module, L2 model).
#pragma once

#if defined(__HIPCC__)
#include <hip/hip_runtime.h>
#define CFA_HIP 1
#elif defined(__CUDACC__)
#include <cuda_runtime.h>

#include <cstdio>  // device printf
#define CFA_CUDA 1
#endif

#if defined(CFA_HIP) || defined(CFA_CUDA)
#define CFA_HOST_DEVICE __host__ __device__ __forceinline__
#define CFA_DEVICE __device__ __forceinline__
#define CFA_GLOBAL __global__
#else
#define CFA_HOST_DEVICE inline
#define CFA_DEVICE inline
#endif

#if defined(CFA_HIP)
using cfaStream_t = hipStream_t;
using cfaError_t = hipError_t;
#define cfaSuccess hipSuccess
#define cfaGetDevice hipGetDevice
#define cfaGetLastError hipGetLastError
#define cfaGetErrorString hipGetErrorString
#define cfaFuncSetAttribute hipFuncSetAttribute
#define cfaFuncAttributeMaxDynamicSharedMemorySize hipFuncAttributeMaxDynamicSharedMemorySize
#define cfaMemsetAsync hipMemsetAsync
#elif defined(CFA_CUDA)
using cfaStream_t = cudaStream_t;
using cfaError_t = cudaError_t;
#define cfaSuccess cudaSuccess
#define cfaGetDevice cudaGetDevice
#define cfaGetLastError cudaGetLastError
#define cfaGetErrorString cudaGetErrorString
#define cfaFuncSetAttribute cudaFuncSetAttribute
#define cfaFuncAttributeMaxDynamicSharedMemorySize cudaFuncAttributeMaxDynamicSharedMemorySize
#define cfaMemsetAsync cudaMemsetAsync
#endif

#if defined(CFA_HIP) || defined(CFA_CUDA)
// The workgroup's dynamic shared memory (LDS), aligned for wgmma's 1024-byte swizzle atoms. One
// declaration serves every kernel: two with different alignments in one unit conflict.
CFA_DEVICE unsigned char* dynamic_smem() {
  extern __shared__ __align__(1024) unsigned char cfa_dynamic_smem[];
  return cfa_dynamic_smem;
}
#endif

#if defined(CFA_HIP) || defined(CFA_CUDA)
// Stops the device with a message: input the kernels cannot read safely (a cu_seqlens that is not
// a packing of its tensor's rows), found on the device, where no exception can be raised. The
// runtime reports it at the next synchronisation (CUDA: "device-side assert"/launch failure).
CFA_DEVICE void device_fail(const char* what) {
  printf("chiplet_fa: %s\n", what);
#if defined(CFA_HIP)
  __builtin_trap();
#else
  __trap();
#endif
}
#endif

// Kernel launches go through one macro, so a platform without the triple-chevron syntax can
// provide its own launcher.
#if defined(CFA_HIP) || defined(CFA_CUDA)
#define CFA_LAUNCH(kernel, grid, block, smem_bytes, stream, ...) \
  kernel<<<grid, block, smem_bytes, stream>>>(__VA_ARGS__)
#endif

// A CPU build that runs the CDNA3 kernels on the host (CHIPLET_FA_EMULATE=cdna3 defines
// CFA_EMULATE): csrc/emulate/ provides the launch, the LDS and the stream type instead of HIP,
// and checks the copy path's global reads (CFA_CHECK_GLOBAL_READ, a no-op on a GPU).
#if defined(CFA_EMULATE) && !defined(CFA_HIP) && !defined(CFA_CUDA)
#include "emulate/emulated_platform.h"
#else
#define CFA_CHECK_GLOBAL_READ(address, bytes) ((void)0)
#endif
