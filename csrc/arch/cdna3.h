// AMD CDNA3 (gfx942, MI300X) matrix and wave primitives behind the interface the forward and
// backward kernels are written against (see arch/arch.h; the backward also uses PaddedTile,
// warp_gemm_abt and warp_gemm_pv, named as in mma_sync.h). A wave has 64 lanes and owns kMT
// m-tiles of 16 rows.
//
// No AMD GPU was available while writing this file: it is compiled for gfx942 in CI (clang-19,
// tools/compile_check.py counts the v_mfma instructions), and its index algebra is checked by a
// CPU model of the fragment layouts (tests/test_mfma_layout.py); it has not run on hardware.
//
// Matrix instruction: v_mfma_f32_16x16x16_{f16,bf16} (D = A B + C, A 16x16, B 16x16, fp32 D).
// With r = lane % 16 and g = lane / 16, lane element j (j = 0..3) of each operand is
//   A[r][4g + j],  B[4g + j][r],  C/D[4g + j][r]
// (AMD's matrix-core examples; the bf16 "_1k" variant has the f16 layout).
//
// Scheme: the products are computed transposed, S^T = K Q^T and O^T = V^T P^T, so the
// accumulator of either holds, per lane, ONE query row (r of its m-tile) and four consecutive
// columns 4g..4g+3 (keys for S, head-dim entries for O). Then
//   - a row's statistics live in lanes r, r+16, r+32, r+48: reductions are xor 16 and xor 32;
//   - the S^T accumulator of key tile nt is, element for element, the B operand (P^T) of the
//     O^T product's k-step nt: P never crosses lanes or touches LDS.
// Accumulator index i = t*(kN/4) + nt*4 + j: m-tile t, 16-column tile nt, element j.
#pragma once
#include <cstdint>

#include "arch/dtype.h"
#include "arch/family.h"

namespace chiplet_fa::CFA_FAMILY::arch {

constexpr int kWarpSize = 64;
// gfx942 LDS: 32 banks of 4 bytes. 8 elements (16 bytes) of skew per row keep rows 16-byte aligned
// (the copies are 16-byte LDS stores) and make the row stride an odd multiple of 4 banks, so the
// 8 lanes of one 16-byte-read phase (8 consecutive rows, same column) cover all 32 banks, and the
// 2-byte V reads of lane groups g and g+1 (rows 4 apart) fall into disjoint banks.
constexpr int kSmemPad = 8;
// LDS a workgroup can allocate on gfx942.
constexpr int kMaxSmemBytes = 64 * 1024;

// Its tiles, which above D = 128 are what fits kMaxSmemBytes: kernels/tile_sizes.h (cdna3_*_tiling).
constexpr int padded_head_dim(int d) { return d; }

template <int kRows, int kD>
struct PaddedTile {
  static constexpr int kTileRows = kRows, kTileCols = kD;
  static constexpr int kStride = kD + kSmemPad;
  static constexpr int kElems = kRows * kStride;
  static constexpr int kRowPitch = kStride, kSwizzleRows = 1;  // no swizzle: see SmemTile in sm90.h
  static CFA_DEVICE int offset(int row, int col) { return row * kStride + col; }
};
template <int kRows, int kD>
using SmemTile = PaddedTile<kRows, kD>;

// bfloat16 as 16 raw bits; built from a float with round-to-nearest-even (NaN stays NaN), read
// back exactly (the backward widens its inputs and staged dS^T to fp32).
struct BFloat16 {
  uint16_t bits;
  BFloat16() = default;
  CFA_HOST_DEVICE explicit BFloat16(float f) : bits(round_bits(f)) {}
  CFA_HOST_DEVICE explicit operator float() const { return __builtin_bit_cast(float, uint32_t(bits) << 16); }
  static CFA_HOST_DEVICE uint16_t round_bits(float f) {
    const uint32_t u = __builtin_bit_cast(uint32_t, f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);  // quiet NaN
    return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
};
static_assert(sizeof(BFloat16) == 2);

template <DType> struct Element;
template <> struct Element<DType::kFloat16> { using type = _Float16; };
template <> struct Element<DType::kBFloat16> { using type = BFloat16; };

// (16*kMT) x kN fp32 accumulator, transposed-product layout (see top).
template <int kMT, int kN>
struct Acc {
  static_assert(kN % 16 == 0);
  static constexpr int kSize = kMT * kN / 4;
  static constexpr int kSlots = kMT;
  static constexpr int kRows = 16 * kMT;
  float x[kSize];
  static CFA_DEVICE constexpr int slot(int i) { return i / (kN / 4); }
  static CFA_DEVICE int row(int i, int lane) { return 16 * slot(i) + lane % 16; }
  static CFA_DEVICE int col(int i, int lane) { return 16 * ((i % (kN / 4)) / 4) + 4 * (lane / 16) + i % 4; }
};
CFA_DEVICE int slot_row(int slot, int lane) { return 16 * slot + lane % 16; }
CFA_DEVICE bool owns_row_stats(int lane) { return lane < 16; }

CFA_DEVICE float row_allreduce_max(float v) {
  v = fmaxf(v, __shfl_xor(v, 16));
  return fmaxf(v, __shfl_xor(v, 32));
}
CFA_DEVICE float row_allreduce_sum(float v) {
  v += __shfl_xor(v, 16);
  return v + __shfl_xor(v, 32);
}
template <int kLanes>  // as in nvidia_common.h
CFA_DEVICE float lane_group_sum(float v) {
#pragma unroll
  for (int m = kLanes / 2; m > 0; m /= 2) v += __shfl_xor(v, m);
  return v;
}
CFA_DEVICE bool warp_any(bool pred) { return __any(pred); }

// --- global -> LDS copies ---
// gfx942 has no 16-byte asynchronous global->LDS copy (its LDS-direct loads move 4 bytes per
// lane into a wave-contiguous LDS range, which a padded row layout does not match), so the copy
// is a 16-byte global load into registers followed by a 16-byte LDS store. Every kernel ordering
// that holds for a copy landing anywhere between its issue and copy_wait holds for one landing
// at its issue: the data is in LDS before the issuing thread's next block_sync (a workgroup
// barrier, which also orders the LDS stores), and the kernel issues a copy only after the barrier
// that retires the readers of the buffer it overwrites. commit/wait are therefore no-ops. The cost
// is overlap: a wave waits for its load before going on, instead of computing meanwhile.
using Words4 = uint32_t __attribute__((ext_vector_type(4)));
CFA_DEVICE void copy_16B_async(void* smem, const void* gmem, bool valid) {
  Words4 v = {0u, 0u, 0u, 0u};
  if (valid) {
    CFA_CHECK_GLOBAL_READ(gmem, 16);
    v = *static_cast<const Words4*>(gmem);
  }
  *static_cast<Words4*>(smem) = v;
}
CFA_DEVICE void copy_commit() {}
template <int kPending>
CFA_DEVICE void copy_wait() {}

// --- matrix primitives ---
using Half4 = _Float16 __attribute__((ext_vector_type(4)));
using Short4 = short __attribute__((ext_vector_type(4)));
using Float4 = float __attribute__((ext_vector_type(4)));
using Words2 = uint32_t __attribute__((ext_vector_type(2)));

// c += A B for one 16x16x16 step; a and b carry 4 16-bit values each (element 2w in the low
// half of word w).
template <typename T>
CFA_DEVICE Float4 mfma_16x16x16(Words2 a, Words2 b, Float4 c);
template <>
CFA_DEVICE Float4 mfma_16x16x16<_Float16>(Words2 a, Words2 b, Float4 c) {
  return __builtin_amdgcn_mfma_f32_16x16x16f16(__builtin_bit_cast(Half4, a), __builtin_bit_cast(Half4, b), c, 0, 0, 0);
}
template <>
CFA_DEVICE Float4 mfma_16x16x16<BFloat16>(Words2 a, Words2 b, Float4 c) {
  return __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(__builtin_bit_cast(Short4, a), __builtin_bit_cast(Short4, b), c, 0, 0, 0);
}

template <int kMT, int kN>
CFA_DEVICE Float4 acc_tile(const Acc<kMT, kN>& acc, int t, int nt) {
  const float* x = &acc.x[t * (kN / 4) + nt * 4];
  return Float4{x[0], x[1], x[2], x[3]};
}
template <int kMT, int kN>
CFA_DEVICE void set_acc_tile(Acc<kMT, kN>& acc, int t, int nt, Float4 v) {
  float* x = &acc.x[t * (kN / 4) + nt * 4];
  x[0] = v[0]; x[1] = v[1]; x[2] = v[2]; x[3] = v[3];
}

// s = A B^T for the 16*kMT rows of sA and the kN rows of sB (both row-major, kD columns; in the
// forward A = Q, B = K), computed as S^T = B A^T. The kD columns are walked 32 at a time: lane
// (r, g) reads 8 consecutive entries d = 32p + 8g .. +7 of its B row 16nt + r and A row 16t + r
// with one 16-byte LDS read; entries 4h..4h+3 feed MFMA k-step h in {0, 1}. The k index of a
// step may map to any column as long as both operands agree, and both use this mapping.
template <typename T, int kMT, int kN, int kD>
CFA_DEVICE void warp_gemm_abt(Acc<kMT, kN>& s, const T* sA, const T* sB, int stride, int lane) {
  static_assert(kD % 32 == 0, "warp_gemm_abt walks the columns 32 at a time");
  Float4 acc[kMT][kN / 16];
#pragma unroll
  for (int t = 0; t < kMT; ++t)
#pragma unroll
    for (int nt = 0; nt < kN / 16; ++nt) acc[t][nt] = Float4{0.f, 0.f, 0.f, 0.f};
  const int r = lane % 16, g = lane / 16;
  const T* a_lane = sA + r * stride + 8 * g;
  const T* b_lane = sB + r * stride + 8 * g;
#pragma unroll 2
  for (int p = 0; p < kD / 32; ++p) {
    Words4 a[kMT];
#pragma unroll
    for (int t = 0; t < kMT; ++t) a[t] = *reinterpret_cast<const Words4*>(a_lane + t * 16 * stride + 32 * p);
#pragma unroll
    for (int nt = 0; nt < kN / 16; ++nt) {
      const Words4 b = *reinterpret_cast<const Words4*>(b_lane + nt * 16 * stride + 32 * p);
#pragma unroll
      for (int t = 0; t < kMT; ++t) {
        acc[t][nt] = mfma_16x16x16<T>(b.xy, a[t].xy, acc[t][nt]);
        acc[t][nt] = mfma_16x16x16<T>(b.zw, a[t].zw, acc[t][nt]);
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kMT; ++t)
#pragma unroll
    for (int nt = 0; nt < kN / 16; ++nt) set_acc_tile(s, t, nt, acc[t][nt]);
}

template <typename T>
CFA_DEVICE uint32_t pack2(float lo, float hi);
template <>
CFA_DEVICE uint32_t pack2<_Float16>(float lo, float hi) {
  const _Float16 h[2] = {_Float16(lo), _Float16(hi)};
  return __builtin_bit_cast(uint32_t, h);
}
template <>
CFA_DEVICE uint32_t pack2<BFloat16>(float lo, float hi) {
  return uint32_t(BFloat16::round_bits(lo)) | uint32_t(BFloat16::round_bits(hi)) << 16;
}

// P rounded to T as B operands of O^T = V^T P^T: tile (t, nt) of the S^T accumulator is the
// operand of m-tile t, k-step nt as it stands (lane (r, g) holds P[16t + r][16nt + 4g + j]).
template <typename T, int kMT, int kN>
struct PFrag {
  Words2 b[kMT][kN / 16];
};
// Accumulator entries i and i + 1 (i even) rounded into their operand word.
template <typename T, int kMT, int kN>
CFA_DEVICE void pack_p_pair(PFrag<T, kMT, kN>& pf, int i, float lo, float hi) {
  pf.b[i / (kN / 4)][(i % (kN / 4)) / 4][(i % 4) / 2] = pack2<T>(lo, hi);
}
template <typename T, int kMT, int kN>
CFA_DEVICE void pack_p(PFrag<T, kMT, kN>& pf, const Acc<kMT, kN>& p) {
#pragma unroll
  for (int i = 0; i < Acc<kMT, kN>::kSize; i += 2) pack_p_pair(pf, i, p.x[i], p.x[i + 1]);
}

CFA_DEVICE float fast_tanh(float x) { return tanhf(x); }
// -ffast-math (CFA_CDNA3_MATH_FLAGS) already makes exp2f one v_exp_f32.
CFA_DEVICE float fast_exp2(float x) { return exp2f(x); }

// o += P V for P in registers and the kN rows of sV (row-major [key][d]; in the backward also
// dO, Q or a column slice of K), computed as O^T += V^T P^T. The A operand of head-dim tile dt,
// k-step kk is V^T[16dt + r][16kk + 4g + j] = V[16kk + 4g + j][16dt + r]:
// four 2-byte reads from four V rows (a transposing read; gfx942 has no LDS transpose load).
// Lanes 16g..16g+15 read 16 consecutive entries of one row; rows of groups g, g+1 sit 4 rows
// apart, in disjoint banks with kSmemPad (see there).
template <typename T, int kMT, int kN, int kD>
CFA_DEVICE void warp_gemm_pv(Acc<kMT, kD>& o, const PFrag<T, kMT, kN>& pf, const T* sV, int stride, int lane) {
  const int r = lane % 16, g = lane / 16;
  const uint16_t* v_lane = reinterpret_cast<const uint16_t*>(sV) + 4 * g * stride + r;
#pragma unroll
  for (int kk = 0; kk < kN / 16; ++kk) {
    const uint16_t* rows = v_lane + 16 * kk * stride;
#pragma unroll
    for (int dt = 0; dt < kD / 16; ++dt) {
      const uint16_t* e = rows + 16 * dt;
      const Words2 a = {uint32_t(e[0]) | uint32_t(e[stride]) << 16,
                        uint32_t(e[2 * stride]) | uint32_t(e[3 * stride]) << 16};
#pragma unroll
      for (int t = 0; t < kMT; ++t) set_acc_tile(o, t, dt, mfma_16x16x16<T>(a, pf.b[t][kk], acc_tile(o, t, dt)));
    }
  }
}

CFA_DEVICE void block_sync() { __syncthreads(); }

}  // namespace chiplet_fa::CFA_FAMILY::arch

#include "tile_gemm.h"
