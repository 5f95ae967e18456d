// Pieces shared by the NVIDIA paths (sm80.h: mma.sync, sm90.h: wgmma): element types, the
// accumulator layout, row reductions, cp.async copies and P packing. Both paths give a warp
// 16-row m-tiles whose accumulators follow the m16n8 C layout (the wgmma m64nN accumulator is
// that layout per warp): in each m-tile a thread holds rows lane/4 and lane/4 + 8 ("row
// slots"), and each row is spread over one quad of lanes.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "arch/dtype.h"
#include "arch/family.h"

namespace chiplet_fa::CFA_FAMILY::arch {

constexpr int kWarpSize = 32;

template <DType> struct Element;
template <> struct Element<DType::kFloat16> { using type = __half; };
template <> struct Element<DType::kBFloat16> { using type = __nv_bfloat16; };

// (16*kMT) x kN fp32 accumulator. m-tile t, n8 tile j holds (r, 2c), (r, 2c+1), (r+8, 2c),
// (r+8, 2c+1) at x[t*kN/2 + 4j ..], with r = lane/4, c = lane%4.
template <int kMT, int kN>
struct Acc {
  static constexpr int kSize = kMT * kN / 2;
  static constexpr int kSlots = 2 * kMT;
  static constexpr int kRows = 16 * kMT;
  float x[kSize];
  static CFA_DEVICE constexpr int slot(int i) { return (i / (kN / 2)) * 2 + ((i >> 1) & 1); }
  static CFA_DEVICE int row(int i, int lane) { return 8 * slot(i) + (lane >> 2); }
  static CFA_DEVICE int col(int i, int lane) { return ((i % (kN / 2)) >> 2) * 8 + (lane & 3) * 2 + (i & 1); }
};
CFA_DEVICE int slot_row(int slot, int lane) { return 8 * slot + (lane >> 2); }
CFA_DEVICE bool owns_row_stats(int lane) { return (lane & 3) == 0; }

CFA_DEVICE float row_allreduce_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
CFA_DEVICE bool warp_any(bool pred) { return __any_sync(0xffffffffu, pred); }
CFA_DEVICE float row_allreduce_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
// The sum over each group of kLanes neighbouring lanes (a power of two); every lane takes part.
template <int kLanes>
CFA_DEVICE float lane_group_sum(float v) {
#pragma unroll
  for (int m = kLanes / 2; m > 0; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

// v as lane 0 holds it, which the compiler then knows every lane holds: values the wgmma
// descriptors are built from (warpgroup index, ring stage) stay in uniform registers instead of
// being moved there before every product.
CFA_DEVICE int warp_uniform(int v) { return __shfl_sync(0xffffffffu, v, 0); }
// v, which the compiler cannot see through: what is computed from it in a loop stays in the loop
// (a hoisted address table held across a loop spills where registers are short).
CFA_DEVICE int opaque(int v) {
  int r;
  asm volatile("mov.b32 %0, %1;\n" : "=r"(r) : "r"(v));
  return r;
}

// The 32-bit shared-memory address PTX operands take.
CFA_DEVICE uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// --- global -> shared copies (cp.async, 16 bytes, zero-filled when !valid) ---
CFA_DEVICE void copy_16B_async(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(smem)), "l"(gmem),
               "r"(valid ? 16 : 0));
}
CFA_DEVICE void copy_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
CFA_DEVICE void copy_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
#if defined(CFA_FAMILY_SM90)
  // The tensor cores read shared memory through the async proxy; order the copies before it.
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

template <typename T>
CFA_DEVICE uint32_t pack2(float lo, float hi);
template <>
CFA_DEVICE uint32_t pack2<__half>(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}
template <>
CFA_DEVICE uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}

// P rounded to T as mma A fragments. The C layout of two n8 tiles is the A layout of one k16
// step, so P goes from the S accumulator to the PV product without touching shared memory,
// and packing it early halves the registers it holds during that product.
template <typename T, int kMT, int kN>
struct PFrag {
  uint32_t a[kMT][kN / 16][4];
};
// Accumulator entries i and i + 1 (i even) rounded into their fragment word.
template <typename T, int kMT, int kN>
CFA_DEVICE void pack_p_pair(PFrag<T, kMT, kN>& pf, int i, float lo, float hi) {
  pf.a[i / (kN / 2)][(i % (kN / 2)) / 8][(i % 8) / 2] = pack2<T>(lo, hi);
}
template <typename T, int kMT, int kN>
CFA_DEVICE void pack_p(PFrag<T, kMT, kN>& pf, const Acc<kMT, kN>& p) {
#pragma unroll
  for (int i = 0; i < Acc<kMT, kN>::kSize; i += 2) pack_p_pair(pf, i, p.x[i], p.x[i + 1]);
}

// 2^x on the special-function unit, results below 2^-126 flushed to 0 (2^-inf = 0). exp2f keeps
// subnormal results at the price of a compare and two predicated multiplies around each MUFU,
// which were a quarter of the forward's instructions a step.
CFA_DEVICE float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// tanh on the special-function unit (sm_75+; max relative error about 2^-11, below bf16's).
CFA_DEVICE float fast_tanh(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

CFA_DEVICE void block_sync() { __syncthreads(); }

}  // namespace chiplet_fa::CFA_FAMILY::arch
