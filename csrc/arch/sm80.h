// NVIDIA sm_80+ (Ampere, Hopper) matrix and warp primitives behind the interface the forward
// kernel is written against (see arch/arch.h). A warp owns kMT m-tiles of 16 query rows.
// Accumulators follow the mma.m16n8k16 C layout: in each m-tile a thread holds rows lane/4
// and lane/4 + 8, so it has 2*kMT "row slots", and each row is spread over one quad of lanes.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "../fwd_params.h"
#include "../platform.h"

namespace chiplet_fa::arch {

constexpr int kWarpSize = 32;
constexpr int kSmemPad = 8;  // 16-byte skew per shared-memory row: ldmatrix's 8 rows hit 8 bank groups

template <DType> struct Element;
template <> struct Element<DType::kFloat16> { using type = __half; };
template <> struct Element<DType::kBFloat16> { using type = __nv_bfloat16; };

// (16*kMT) x kN fp32 accumulator. m-tile t, n8 tile j holds (r, 2c), (r, 2c+1), (r+8, 2c),
// (r+8, 2c+1) at x[t*kN/2 + 4j ..], with r = lane/4, c = lane%4.
template <int kMT, int kN>
struct Acc {
  static constexpr int kSize = kMT * kN / 2;
  static constexpr int kSlots = 2 * kMT;
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

// --- global -> shared copies (cp.async, 16 bytes, zero-filled when !valid) ---
CFA_DEVICE void copy_16B_async(void* smem, const void* gmem, bool valid) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem),
               "r"(valid ? 16 : 0));
}
CFA_DEVICE void copy_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
CFA_DEVICE void copy_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending)); }

// --- matrix primitives ---
CFA_DEVICE void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
CFA_DEVICE void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}

template <typename T>
CFA_DEVICE void mma_16816(float* c, const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
CFA_DEVICE void mma_16816<__half>(float* c, const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
CFA_DEVICE void mma_16816<__nv_bfloat16>(float* c, const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
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

// s = Q K^T for the warp's 16*kMT rows of sQ and the kN keys of sK (both row-major [row][d]).
template <typename T, int kMT, int kN, int kD>
CFA_DEVICE void gemm_qk(Acc<kMT, kN>& s, const T* sQ, const T* sK, int stride, int lane) {
#pragma unroll
  for (int i = 0; i < Acc<kMT, kN>::kSize; ++i) s.x[i] = 0.f;
  const T* q_base = sQ + (lane % 16) * stride + (lane / 16) * 8;
  const T* k_base = sK + ((lane / 16) * 8 + lane % 8) * stride + ((lane / 8) % 2) * 8;
#pragma unroll 2
  for (int kk = 0; kk < kD / 16; ++kk) {
    uint32_t a[kMT][4];
#pragma unroll
    for (int t = 0; t < kMT; ++t) ldmatrix_x4(a[t], q_base + t * 16 * stride + kk * 16);
#pragma unroll
    for (int nt = 0; nt < kN / 16; ++nt) {
      uint32_t b[4];
      ldmatrix_x4(b, k_base + nt * 16 * stride + kk * 16);
#pragma unroll
      for (int t = 0; t < kMT; ++t) {
        mma_16816<T>(&s.x[t * kN / 2 + (2 * nt) * 4], a[t], b[0], b[1]);
        mma_16816<T>(&s.x[t * kN / 2 + (2 * nt + 1) * 4], a[t], b[2], b[3]);
      }
    }
  }
}

// P rounded to T as mma A fragments. The C layout of two n8 tiles is the A layout of one k16
// step, so P goes from the S accumulator to the PV product without touching shared memory,
// and packing it early halves the registers it holds during that product.
template <typename T, int kMT, int kN>
struct PFrag {
  uint32_t a[kMT][kN / 16][4];
};
template <typename T, int kMT, int kN>
CFA_DEVICE void pack_p(PFrag<T, kMT, kN>& pf, const Acc<kMT, kN>& p) {
#pragma unroll
  for (int t = 0; t < kMT; ++t)
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float* c = &p.x[t * kN / 2 + kk * 8 + j * 2];
        pf.a[t][kk][j] = pack2<T>(c[0], c[1]);
      }
}

// o += P V for the kN keys of sV (row-major [key][d]).
template <typename T, int kMT, int kN, int kD>
CFA_DEVICE void gemm_pv(Acc<kMT, kD>& o, const PFrag<T, kMT, kN>& pf, const T* sV, int stride, int lane) {
  const T* base = sV + (((lane / 8) % 2) * 8 + lane % 8) * stride + (lane / 16) * 8;
#pragma unroll
  for (int kk = 0; kk < kN / 16; ++kk) {
#pragma unroll
    for (int dt = 0; dt < kD / 16; ++dt) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, base + kk * 16 * stride + dt * 16);
#pragma unroll
      for (int t = 0; t < kMT; ++t) {
        mma_16816<T>(&o.x[t * kD / 2 + (2 * dt) * 4], pf.a[t][kk], b[0], b[1]);
        mma_16816<T>(&o.x[t * kD / 2 + (2 * dt + 1) * 4], pf.a[t][kk], b[2], b[3]);
      }
    }
  }
}

CFA_DEVICE void block_sync() { __syncthreads(); }

}  // namespace chiplet_fa::arch
