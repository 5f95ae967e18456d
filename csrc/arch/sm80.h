// NVIDIA sm_80+ path: warp-level mma.sync m16n8k16 with ldmatrix operands from padded
// row-major shared memory. A warp owns kMT m-tiles of 16 query rows.
#pragma once
#include "nvidia_common.h"

namespace chiplet_fa::arch {

// Two m-tiles per warp let each K/V fragment read from shared memory feed twice the MMAs (one
// m-tile leaves the kernel bound by ldmatrix bandwidth); above D=128 the output accumulator no
// longer fits twice in registers. 64 keys per step at D=96/128 would need > 255 registers.
constexpr int padded_head_dim(int d) { return d; }
constexpr int m_tiles_per_warp(int d) { return d <= 128 ? 2 : 1; }
constexpr int block_n(int d) { return m_tiles_per_warp(d) == 2 && d > 64 ? 32 : 64; }

// Row-major tile, rows skewed by 16 bytes so ldmatrix's 8 row addresses hit 8 bank groups.
template <int kRows, int kD>
struct SmemTile {
  static constexpr int kStride = kD + 8;
  static constexpr int kElems = kRows * kStride;
  static CFA_DEVICE int offset(int row, int col) { return row * kStride + col; }
};

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

// s = Q K^T for warp `warp`'s 16*kMT rows of the Q tile and the kN keys of the K tile.
template <typename T, int kMT, int kN, int kD, int kQRows>
CFA_DEVICE void gemm_qk(Acc<kMT, kN>& s, const T* sQ, const T* sK, int warp, int lane) {
  constexpr int stride = SmemTile<1, kD>::kStride;
#pragma unroll
  for (int i = 0; i < Acc<kMT, kN>::kSize; ++i) s.x[i] = 0.f;
  const T* q_base = sQ + (warp * 16 * kMT + lane % 16) * stride + (lane / 16) * 8;
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

// o += P V for the kN keys of sV (row-major [key][d]).
template <typename T, int kMT, int kN, int kD>
CFA_DEVICE void gemm_pv(Acc<kMT, kD>& o, const PFrag<T, kMT, kN>& pf, const T* sV, int warp, int lane) {
  (void)warp;  // every warp multiplies by the whole V tile
  constexpr int stride = SmemTile<1, kD>::kStride;
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

}  // namespace chiplet_fa::arch
