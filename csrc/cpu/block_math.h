// The CPU kernels' inner loops: a register-tiled matrix product, an exponential and the staging of
// tiles, vectorised without -ffast-math. Every vector lane is a different output element, so no
// sum is reordered: each element adds its terms in the order a scalar loop would.
#pragma once
#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>

namespace chiplet_fa {

// The instruction sets the kernels are compiled for (cpu/isa.h picks one at run time): the width
// of a vector and the rows of matmul_add's register tile, which is that many rows of two vectors
// (AVX2 and the 16-byte sets have 16 vector registers: 8 accumulators; AVX-512 has 32: 16).
struct IsaBase {  // the compiler's baseline: SSE2 on x86-64, NEON on AArch64
  static constexpr int kVecBytes = 16, kTileRows = 4;
};
struct IsaAvx2 {
  static constexpr int kVecBytes = 32, kTileRows = 4;
};
struct IsaAvx512 {
  static constexpr int kVecBytes = 64, kTileRows = 8;
};
template <typename Acc, typename Isa>
constexpr int kTileCols = 2 * Isa::kVecBytes / int(sizeof(Acc));

constexpr int round_up(int x, int to) { return (x + to - 1) / to * to; }

// The functions between an instruction-set variant (cpu/isa.h) and the loops are all inlined into
// the variant, so that the loops are compiled for its target. (The variants' flatten attribute
// does that in gcc; clang's inlines only their direct calls and left the kernels on the baseline
// instruction set: 10x slower.)
#define CFA_CPU_INLINE inline __attribute__((always_inline))

template <typename Acc, int Bytes>
struct VecOf {
  typedef Acc type __attribute__((vector_size(Bytes)));
};

// C (m x n, row stride ldc) += A B over k terms, where A's element (i, l) is a[i * a_row + l * a_col]
// (either layout: A is read one element at a time, broadcast to a vector) and B is row-major with
// row stride ldb. m and n are multiples of the register tile: callers pad their buffers with zeros.
// Written with vector types: gcc's vectoriser made 4 GFLOP/s of the same plain loops with A
// row-major and 32-53 with A transposed (AVX2, double, one core), against 49-50 like this (and
// 104-119 with AVX-512), whichever A.
template <typename Acc, typename Isa>
CFA_CPU_INLINE void matmul_add(int m, int n, int k, const Acc* a, int64_t a_row, int64_t a_col, const Acc* b,
                               int64_t ldb, Acc* c, int64_t ldc) {
  using V = typename VecOf<Acc, Isa::kVecBytes>::type;
  constexpr int R = Isa::kTileRows, L = Isa::kVecBytes / int(sizeof(Acc));
  for (int i0 = 0; i0 < m; i0 += R)
    for (int j0 = 0; j0 < n; j0 += 2 * L) {
      V acc[R][2];
      for (int i = 0; i < R; ++i)
        for (int v = 0; v < 2; ++v) std::memcpy(&acc[i][v], c + (i0 + i) * ldc + j0 + v * L, sizeof(V));
      for (int l = 0; l < k; ++l) {
        V bl[2];
        for (int v = 0; v < 2; ++v) std::memcpy(&bl[v], b + l * ldb + j0 + v * L, sizeof(V));
        for (int i = 0; i < R; ++i) {
          const Acc ail = a[(i0 + i) * a_row + l * a_col];
          for (int v = 0; v < 2; ++v) acc[i][v] += ail * bl[v];
        }
      }
      for (int i = 0; i < R; ++i)
        for (int v = 0; v < 2; ++v) std::memcpy(c + (i0 + i) * ldc + j0 + v * L, &acc[i][v], sizeof(V));
    }
}

// exp(x), to about an ulp, as straight-line arithmetic a loop over lanes vectorises (a libm call
// does not): x = k ln2 + r with |r| <= ln2 / 2 (ln2 split in two, the high part short enough that
// k times it is exact), exp(r) by its Taylor polynomial (degree 13 in double, 7 in float: the
// first term left out is under half an ulp), 2^k put into the exponent bits. Results below the
// smallest normal number flush to 0 (the softmax adds them to terms of order 1); arguments above
// kHigh give +inf; NaN stays NaN.
template <typename Acc>
struct ExpTraits;
template <>
struct ExpTraits<double> {
  using Bits = uint64_t;
  static constexpr int kDegree = 13, kMantissa = 52, kBias = 1023;
  static constexpr double kLow = -708.3, kHigh = 709.0, kShift = 0x1.8p52;
  static constexpr double kLn2Hi = 0x1.62e42feep-1, kLn2Lo = 0x1.a39ef35793c76p-33;  // fdlibm's split
};
template <>
struct ExpTraits<float> {
  using Bits = uint32_t;
  static constexpr int kDegree = 7, kMantissa = 23, kBias = 127;
  static constexpr float kLow = -87.3f, kHigh = 88.0f, kShift = 0x1.8p23f;
  static constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;  // Cephes' split
};

template <typename Acc>
CFA_CPU_INLINE Acc exp_lane(Acc x) {
  using E = ExpTraits<Acc>;
  using Bits = typename E::Bits;
  constexpr auto coef = [] {  // 1 / n!
    std::array<Acc, E::kDegree + 1> c{1};
    for (int n = 1; n <= E::kDegree; ++n) c[n] = c[n - 1] / Acc(n);
    return c;
  }();
  const Acc t = x * Acc(1.4426950408889634) + E::kShift;  // round(x / ln2) in t's low mantissa bits
  const Acc kf = t - E::kShift;
  const Acc r = (x - kf * E::kLn2Hi) - kf * E::kLn2Lo;
  Acc poly = coef[E::kDegree];
  for (int n = E::kDegree - 1; n >= 0; --n) poly = poly * r + coef[n];
  // Shifting t's bits leaves k (two's complement) in the exponent field; the bias makes it 2^k.
  const Bits k_bits = std::bit_cast<Bits>(t) << E::kMantissa;
  const Acc scale = std::bit_cast<Acc>(Bits(k_bits + (Bits(E::kBias) << E::kMantissa)));
  // Outside [kLow, kHigh] k overflows the exponent field and y is garbage: the selects replace it.
  // (Clamping x first instead let gcc fold the clamped paths into constants and stop vectorising.)
  Acc y = poly * scale;
  y = x < E::kLow ? Acc(0) : y;
  return x > E::kHigh ? std::numeric_limits<Acc>::infinity() : y;
}

template <typename Acc>
CFA_CPU_INLINE void exp_inplace(Acc* x, int n) {
  for (int i = 0; i < n; ++i) x[i] = exp_lane(x[i]);
}

// dst (n x D, row stride ld) = src rows (n of D elements, row stride src_row) * scale, converted.
template <typename T, typename Acc>
CFA_CPU_INLINE void stage_rows(const T* src, int64_t src_row, int n, int D, Acc scale, Acc* dst, int ld) {
  for (int r = 0; r < n; ++r)
    for (int d = 0; d < D; ++d) dst[r * ld + d] = Acc(src[r * src_row + d]) * scale;
}

// dst (D x n, row stride ld) = the transpose of src rows (n of D elements, row stride src_row) * scale,
// in 8 x 8 blocks: a row at a time, the stores went to D lines 8 * ld bytes apart (~6x slower).
template <typename T, typename Acc>
CFA_CPU_INLINE void stage_transposed(const T* src, int64_t src_row, int n, int D, Acc scale, Acc* dst, int ld) {
  constexpr int B = 8;
  for (int r0 = 0; r0 < n; r0 += B)
    for (int d0 = 0; d0 < D; d0 += B)
      for (int d = d0; d < std::min(d0 + B, D); ++d)
        for (int r = r0; r < std::min(r0 + B, n); ++r) dst[d * ld + r] = Acc(src[r * src_row + d]) * scale;
}

}  // namespace chiplet_fa
