// Warp-level mma.sync m16n8k16 on padded row-major shared memory (ldmatrix operands), for
// sm_80 and later. The sm80 forward path is built on it, and so is the backward kernel on
// every NVIDIA build (including the wgmma one).
#pragma once
#include "nvidia_common.h"

namespace chiplet_fa::CFA_FAMILY::arch {

// Row-major tile, rows skewed by 16 bytes so ldmatrix's 8 row addresses hit 8 bank groups.
template <int kRows, int kD>
struct PaddedTile {
  static constexpr int kTileRows = kRows, kTileCols = kD;
  static constexpr int kStride = kD + 8;
  static constexpr int kElems = kRows * kStride;
  static constexpr int kRowPitch = kStride, kSwizzleRows = 1;  // no swizzle: see SmemTile in sm90.h
  static CFA_DEVICE int offset(int row, int col) { return row * kStride + col; }
};

// --- matrix primitives ---
CFA_DEVICE void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(smem)));
}
CFA_DEVICE void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(smem)));
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

// s = A B^T for the 16*kMT rows of A at sA and the kN rows of B at sB (both row-major with
// `stride` elements per row, kD columns).
template <typename T, int kMT, int kN, int kD>
CFA_DEVICE void warp_gemm_abt(Acc<kMT, kN>& s, const T* sA, const T* sB, int stride, int lane) {
#pragma unroll
  for (int i = 0; i < Acc<kMT, kN>::kSize; ++i) s.x[i] = 0.f;
  const T* q_base = sA + (lane % 16) * stride + (lane / 16) * 8;
  const T* k_base = sB + ((lane / 16) * 8 + lane % 8) * stride + ((lane / 8) % 2) * 8;
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

// o += P V for P in registers and the kN rows of V at sV (row-major, `stride` elements per row).
template <typename T, int kMT, int kN, int kD>
CFA_DEVICE void warp_gemm_pv(Acc<kMT, kD>& o, const PFrag<T, kMT, kN>& pf, const T* sV, int stride, int lane) {
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

}  // namespace chiplet_fa::CFA_FAMILY::arch
