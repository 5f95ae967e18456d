// NVIDIA sm_90a path: warpgroup MMA (wgmma), used by the warp-specialised forward kernel
// (kernels/sm90/fwd_kernel_sm90.h). A warpgroup (4 warps) multiplies 64 query rows per instruction with K
// and V read by the tensor cores straight from shared memory, so the ldmatrix traffic that
// bounds the mma.sync path disappears. Each warp still owns one 16-row m-tile and sees the
// m16n8 accumulator layout, so the online softmax code is the one every path uses.
// The products are asynchronous: issue, wgmma_commit, then wgmma_wait before touching the
// accumulators.
// Shared-memory tiles are stored as 64-column panels ([row][64] with the 128-byte swizzle,
// 16-byte chunk index XOR row % 8), the canonical layout wgmma reads K-major (Q, K) and,
// with the transpose bit, N-major (V).
#pragma once
#include "mma_sync.h"  // the backward kernel's warp-level MMAs
#include "nvidia_common.h"
#include "wgmma_ops.h"

namespace chiplet_fa::CFA_FAMILY::arch {

// Panels are 64 columns wide: head dims below a multiple of 64 run zero-padded.
constexpr int padded_head_dim(int d) { return (d + 63) / 64 * 64; }

template <int kRows, int kD>
struct SmemTile {
  static_assert(kD % 64 == 0 && kRows % 8 == 0, "whole 64-column panels of 8-row swizzle atoms");
  static constexpr int kTileRows = kRows, kTileCols = kD;
  static constexpr int kElems = kRows * kD;
  static constexpr int kPanel = kRows * 64;  // elements per panel (kRows * 128 bytes)
  // Rows kSwizzleRows apart have the same swizzle: their offsets differ by the rows times kRowPitch.
  static constexpr int kRowPitch = 64, kSwizzleRows = 8;
  static CFA_DEVICE int offset(int row, int col) {
    return (col / 64) * kPanel + row * 64 + ((((col % 64) / 8) ^ (row % 8)) * 8) + col % 8;
  }
};

// Shared-memory matrix descriptor: start address, leading and stride byte offsets (all >> 4)
// and the 128-byte swizzle mode. Swizzle atoms (8 rows x 128 bytes) must be 1024-byte aligned.
// Built once per tile; the descriptor of a sub-tile is then one 32-bit add of a constant to the
// address field (which cannot carry: shared addresses are below 2^18), not a rebuild from the
// pointer, which cost a consumer ~130 uniform-datapath instructions a step.
struct SmemDesc {
  uint32_t lo, hi;
  CFA_DEVICE SmemDesc(const void* smem, uint32_t leading_bytes, uint32_t stride_bytes)
      : lo(((smem_u32(smem) & 0x3FFFF) >> 4) | (((leading_bytes >> 4) & 0x3FFF) << 16)),
        hi(((stride_bytes >> 4) & 0x3FFF) | (1u << 30)) {}
  template <typename T>
  CFA_DEVICE uint64_t at(int elements) const {
    return (uint64_t(hi) << 32) | (lo + uint32_t(elements * int(sizeof(T))) / 16);
  }
};

CFA_DEVICE void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
CFA_DEVICE void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
CFA_DEVICE void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Ties accumulators an in-flight wgmma reads or writes to this point of the program, so the
// compiler neither moves them nor touches them between issue and wait.
template <int kN>
CFA_DEVICE void pin(float (&x)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(x[i])::"memory");
}

// The same for the packed A fragments of an `rs` product, which must not be overwritten
// before its wgmma_wait.
template <int kK>
CFA_DEVICE void pin(const uint32_t (&a)[1][kK][4]) {
#pragma unroll
  for (int kk = 0; kk < kK; ++kk)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" ::"r"(a[0][kk][j]) : "memory");
}

// Issues s = Q K^T for consumer warpgroup `wg` (rows 64 wg.. of the kQRows-row Q tile) over the
// first kD columns (a multiple of 16); K^T's kN rows may start inside a kKRows-row tile (sK at a
// multiple of 8 rows).
template <typename T, int kN, int kD, int kQRows, int kKRows = kN>
CFA_DEVICE void wgmma_qk(Acc<1, kN>& s, const T* sQ, const T* sK, int wg) {
  const SmemDesc q(sQ + wg * 64 * 64, 16, 1024), k(sK, 16, 1024);  // Q from row 64 * wg
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    // Within a panel a 16-column step is a 32-byte move of the start address; the hardware
    // applies the swizzle to the final address bits.
    const int panel = kk / 4, step = (kk % 4) * 16;
    Wgmma<T, kN>::ss(s.x, q.at<T>(panel * SmemTile<kQRows, 64>::kPanel + step),
                     k.at<T>(panel * SmemTile<kKRows, 64>::kPanel + step), kk > 0);
  }
}

// Issues o += P V: P from registers (the m16 A layout per warp), V read N-major: 8-key groups
// are 1024 bytes apart, 64-column panels kN * 128 bytes apart. kD may end inside a panel (the
// backward's 96 columns of a 128-column tile): the tensor cores address each 8-column group
// by itself, so they read the first kD columns.
template <typename T, int kN, int kD>
CFA_DEVICE void wgmma_pv(Acc<1, kD>& o, const PFrag<T, 1, kN>& pf, const T* sV) {
  const SmemDesc v(sV, SmemTile<kN, 64>::kPanel * int(sizeof(T)), 1024);
#pragma unroll
  for (int kk = 0; kk < kN / 16; ++kk) Wgmma<T, kD>::rs(o.x, pf.a[0][kk], v.at<T>(kk * 16 * 64), 1);
}

// Issues o += A B over kK = 64 inner indices: A one 64 x 64 panel in shared memory, K-major (the
// backward's P^T or dS^T, [key][query]), B read N-major like wgmma_pv's V from a kBRows-row tile,
// its first kN columns (whole panels, or the first half of one) into the first kN of o's columns.
template <typename T, int kN, int kBRows, int kAccN>
CFA_DEVICE void wgmma_pv_ss(Acc<1, kAccN>& o, const T* sA, const T* sB) {
  static_assert(kN <= kAccN, "the product's columns are the accumulator's first");
  const SmemDesc a(sA, 16, 1024), b(sB, SmemTile<kBRows, 64>::kPanel * int(sizeof(T)), 1024);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) Wgmma<T, kN>::template ss<0, 1>(o.x, a.at<T>(kk * 16), b.at<T>(kk * 16 * 64), 1);
}

// Issues d = A B for 64 rows of A stored transposed and B stored N-major: A^T is [kKeys][64], one
// 64-column panel of a kARows-row tile from a_t, B is [kKeys][kN], kN / 64 panels of a kBRows-row
// tile from b (the backward's dQ = dS K, with dS^T staged [key][query] and K [key][d]). Row groups
// of 8 are 1024 bytes apart.
template <typename T, int kKeys, int kARows, int kBRows, int kN>
CFA_DEVICE void wgmma_tn(Acc<1, kN>& d, const T* a_t, const T* b) {
  const SmemDesc da(a_t, SmemTile<kARows, 64>::kPanel * int(sizeof(T)), 1024);
  const SmemDesc db(b, SmemTile<kBRows, 64>::kPanel * int(sizeof(T)), 1024);
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk)
    Wgmma<T, kN>::template ss<1, 1>(d.x, da.at<T>(kk * 16 * 64), db.at<T>(kk * 16 * 64), kk > 0);
}

}  // namespace chiplet_fa::CFA_FAMILY::arch
