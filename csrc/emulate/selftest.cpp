#include "emulate/selftest.h"

#include <cstring>
#include <stdexcept>

#include "emulate/device.h"

namespace chiplet_fa::emu::selftest {
namespace {

using Half4 = _Float16 __attribute__((ext_vector_type(4)));
using Short4 = short __attribute__((ext_vector_type(4)));
using Float4 = float __attribute__((ext_vector_type(4)));

struct MfmaArgs {
  bool bf16;
  const uint16_t *a, *b;
  const float* c;
  float* d;
};

CFA_GLOBAL void mfma_kernel(MfmaArgs p) {
  const int l = threadIdx.x;
  uint16_t a[4], b[4];
  std::memcpy(a, p.a + 4 * l, 8);
  std::memcpy(b, p.b + 4 * l, 8);
  const Float4 c = {p.c[4 * l], p.c[4 * l + 1], p.c[4 * l + 2], p.c[4 * l + 3]};
  Float4 d;
  if (p.bf16)
    d = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(__builtin_bit_cast(Short4, a), __builtin_bit_cast(Short4, b), c,
                                                  0, 0, 0);
  else
    d = __builtin_amdgcn_mfma_f32_16x16x16f16(__builtin_bit_cast(Half4, a), __builtin_bit_cast(Half4, b), c, 0, 0, 0);
  for (int e = 0; e < 4; ++e) p.d[4 * l + e] = d[e];
}

CFA_GLOBAL void shfl_kernel(int mask, int width, const float* in, float* out) {
  out[threadIdx.x] = __shfl_xor(in[threadIdx.x], mask, width);
}

CFA_GLOBAL void any_kernel(const int* in, int* out) { out[threadIdx.x] = __any(in[threadIdx.x]); }

CFA_GLOBAL void exchange_kernel(int shift, int rounds, bool barriers, int* out) {
  int* words = reinterpret_cast<int*>(dynamic_smem());
  const int t = threadIdx.x, n = blockDim.x;
  for (int r = 0; r < rounds; ++r) {
    words[t] = 1000 * r + t;
    if (barriers) __syncthreads();
    out[r * n + t] = words[(t + shift) % n];
    __syncthreads();
  }
}

CFA_GLOBAL void count_kernel(int* workgroups) {
  if (threadIdx.x == 0) __atomic_fetch_add(workgroups, 1, __ATOMIC_RELAXED);
}

CFA_GLOBAL void unwritten_kernel(float* out) { out[0] = reinterpret_cast<const float*>(dynamic_smem())[threadIdx.x]; }

// --- kernels that break a rule ---
CFA_GLOBAL void early_return_kernel(int) {
  if (threadIdx.x >= 64) return;  // wave 1 leaves; wave 0 waits at the barrier forever
  __syncthreads();
}

CFA_GLOBAL void divergent_wave_op_kernel(int) {
  if (threadIdx.x % 2) (void)__shfl_xor(1.f, 1);
  else (void)__any(1);
}

CFA_GLOBAL void divergent_call_site_kernel(int) {
  if (threadIdx.x < 32) (void)__shfl_xor(1.f, 1);
  else (void)__shfl_xor(2.f, 1);
}

CFA_GLOBAL void extra_barrier_kernel(int) {
  __syncthreads();
  if (threadIdx.x == 5) __syncthreads();
}

CFA_GLOBAL void misaligned_read_kernel(const unsigned char* p) { CFA_CHECK_GLOBAL_READ(p + 8, 16); }

CFA_GLOBAL void lds_overrun_kernel(int bytes) { dynamic_smem()[bytes + threadIdx.x] = 0; }

CFA_GLOBAL void partial_wave_mfma_kernel(int) {
  const Float4 c = {0.f, 0.f, 0.f, 0.f};
  const Half4 a = {};
  (void)__builtin_amdgcn_mfma_f32_16x16x16f16(a, a, c, 0, 0, 0);
}

}  // namespace

void mfma(bool bf16, const uint16_t* a, const uint16_t* b, const float* c, float* d) {
  CFA_LAUNCH(mfma_kernel, dim3(1), dim3(64), 0, nullptr, MfmaArgs{bf16, a, b, c, d});
}

void shfl_xor(int threads, int lane_mask, int width, const float* in, float* out) {
  CFA_LAUNCH(shfl_kernel, dim3(1), dim3(unsigned(threads)), 0, nullptr, lane_mask, width, in, out);
}

void any(int threads, const int* in, int* out) {
  CFA_LAUNCH(any_kernel, dim3(1), dim3(unsigned(threads)), 0, nullptr, in, out);
}

void barrier_exchange(int threads, int shift, int rounds, bool barriers, int* out) {
  CFA_LAUNCH(exchange_kernel, dim3(1), dim3(unsigned(threads)), size_t(threads) * 4, nullptr, shift, rounds, barriers,
             out);
}

int64_t count_workgroups(const unsigned (&grid)[3], const unsigned (&block)[3], size_t lds_bytes) {
  int workgroups = 0;
  CFA_LAUNCH(count_kernel, dim3(grid[0], grid[1], grid[2]), dim3(block[0], block[1], block[2]), lds_bytes, nullptr,
             &workgroups);
  return workgroups;
}

float unwritten_lds() {
  float out = 0.f;
  CFA_LAUNCH(unwritten_kernel, dim3(1), dim3(1), 64, nullptr, &out);
  return out;
}

void broken(const std::string& which) {
  alignas(16) static const unsigned char bytes[64] = {};
  if (which == "early_return") CFA_LAUNCH(early_return_kernel, dim3(2), dim3(128), 0, nullptr, 0);
  else if (which == "divergent_wave_op") CFA_LAUNCH(divergent_wave_op_kernel, dim3(1), dim3(64), 0, nullptr, 0);
  else if (which == "divergent_call_site") CFA_LAUNCH(divergent_call_site_kernel, dim3(1), dim3(64), 0, nullptr, 0);
  else if (which == "extra_barrier") CFA_LAUNCH(extra_barrier_kernel, dim3(1), dim3(256), 0, nullptr, 0);
  else if (which == "misaligned_read") CFA_LAUNCH(misaligned_read_kernel, dim3(1), dim3(64), 0, nullptr, bytes);
  else if (which == "lds_overrun") CFA_LAUNCH(lds_overrun_kernel, dim3(1), dim3(64), 256, nullptr, 256);
  else if (which == "partial_wave_mfma") CFA_LAUNCH(partial_wave_mfma_kernel, dim3(1), dim3(96), 0, nullptr, 0);
  else throw std::invalid_argument("selftest.broken: no kernel named " + which);
}

}  // namespace chiplet_fa::emu::selftest
