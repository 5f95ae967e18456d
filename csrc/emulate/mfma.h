// The two matrix-core instructions the CDNA3 kernels call, v_mfma_f32_16x16x16_f16 and
// v_mfma_f32_16x16x16_bf16 (gfx90a's "_1k" variant), as wave operations: each lane passes its
// four A and four B values and four C values; the wave's D = A B + C is computed from the
// operand and result layouts of AMD's description (mfma.cpp), written without reference to
// arch/cdna3.h, so the kernels' fragment algebra is checked against the ISA, not against itself.
#pragma once
#include <cstdint>

namespace chiplet_fa::emu {

using Half4 = _Float16 __attribute__((ext_vector_type(4)));
using Short4 = short __attribute__((ext_vector_type(4)));
using Float4 = float __attribute__((ext_vector_type(4)));

enum class MfmaInput : uint8_t { kF16, kBF16 };

// One lane's operands: element e of a, b, c (16-bit raw values for a and b).
struct MfmaLane {
  uint16_t a[4], b[4];
  float c[4];
};

// D for all 64 lanes from their operands, per AMD's register layout (see mfma.cpp).
void mfma_16x16x16(MfmaInput input, const MfmaLane lanes[64], float d[64][4]);

// The builtins, called per lane (device.h maps __builtin_amdgcn_mfma_* onto them). cbsz, abid
// and blgp must be 0: these instructions have no broadcast modifiers on CDNA3.
Float4 mfma_f32_16x16x16_f16(Half4 a, Half4 b, Float4 c, int cbsz, int abid, int blgp, const char* file, int line);
Float4 mfma_f32_16x16x16_bf16_1k(Short4 a, Short4 b, Float4 c, int cbsz, int abid, int blgp, const char* file,
                                 int line);

}  // namespace chiplet_fa::emu
