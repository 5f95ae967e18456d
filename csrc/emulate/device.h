// What HIP gives device code, for the CDNA3 kernels compiled as host C++ in an emulated build:
// work-item and workgroup ids, __syncthreads, the cross-lane operations, the two MFMA builtins,
// atomicAdd, min/max, uint4 and float4. arch/family.h includes it for the cdna3 family when
// CFA_EMULATE is set; every name keeps its HIP spelling so the kernel source is unchanged.
#pragma once
#include <atomic>
#include <cstdint>

#include "emulate/mfma.h"
#include "emulate/params_regions.h"
#include "emulate/wave_ops.h"
#include "platform.h"

namespace chiplet_fa::emu {
dim3 thread_idx();
dim3 block_idx();
dim3 block_dim();
void block_barrier();
}  // namespace chiplet_fa::emu

#define threadIdx (::chiplet_fa::emu::thread_idx())
#define blockIdx (::chiplet_fa::emu::block_idx())
#define blockDim (::chiplet_fa::emu::block_dim())

inline void __syncthreads() { ::chiplet_fa::emu::block_barrier(); }

template <typename T>
inline T __shfl_xor(T var, int lane_mask, int width = 64, const char* file = __builtin_FILE(),
                    int line = __builtin_LINE()) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "__shfl_xor moves 4- or 8-byte values");
  if constexpr (sizeof(T) == 4)
    return __builtin_bit_cast(T, ::chiplet_fa::emu::shfl_xor32(__builtin_bit_cast(uint32_t, var), lane_mask, width,
                                                               file, line));
  else
    return __builtin_bit_cast(T, ::chiplet_fa::emu::shfl_xor64(__builtin_bit_cast(uint64_t, var), lane_mask, width,
                                                               file, line));
}

inline int __any(int predicate, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return ::chiplet_fa::emu::any(predicate, file, line);
}

// The builtins take the call site along, so lanes that reach the instruction from different
// places are reported as divergent.
#define __builtin_amdgcn_mfma_f32_16x16x16f16(a, b, c, cbsz, abid, blgp) \
  ::chiplet_fa::emu::mfma_f32_16x16x16_f16(a, b, c, cbsz, abid, blgp, __FILE__, __LINE__)
#define __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a, b, c, cbsz, abid, blgp) \
  ::chiplet_fa::emu::mfma_f32_16x16x16_bf16_1k(a, b, c, cbsz, abid, blgp, __FILE__, __LINE__)

// Workgroups run on several host threads: a real atomic.
inline float atomicAdd(float* address, float value) {
  return std::atomic_ref<float>(*address).fetch_add(value, std::memory_order_relaxed);
}

inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }

struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
