#include "emulate/mfma.h"

#include <cstring>
#include <string>
#include <vector>

#include "emulate/workgroup.h"

namespace chiplet_fa::emu {
namespace {

// Register layout of v_mfma_f32_16x16x16_f16 and v_mfma_f32_16x16x16_bf16 on CDNA3 (gfx942),
// as AMD's Matrix Instruction Calculator states it (github.com/ROCm/amd_matrix_instruction_calculator,
// `matrix_calculator.py --architecture cdna3 --instruction v_mfma_f32_16x16x16_f16
// --detail-instruction`, "Register to matrix element mapping"; the calculator encodes the CDNA3
// ISA guide's matrix-instruction chapter); the f16 tables of AMD's ROCm blog "Matrix Core
// Programming on AMD CDNA3 and CDNA4 architecture" (2025, section 5.2) agree. For lane l, GPR g
// of an operand and its 16-bit half h (bits [16h+15 : 16h]):
//   A (src0, 2 GPRs, M x K):  A[i][k]  with i = l % 16,             k = 4 floor(l / 16) + 2g + h
//   B (src1, 2 GPRs, K x N):  B[k][j]  with j = l % 16,             k = 4 floor(l / 16) + 2g + h
//   C, D (src2/vdst, 4 GPRs): C[i][j]  with i = 4 floor(l / 16) + g, j = l % 16
// A 4 x 16-bit vector operand fills its two GPRs low half first, so vector element e is GPR
// e / 2, half e % 2; an element of C or D is one GPR. Both instructions share the layout and
// compute D = A B + C with fp32 C and D.
constexpr int kM = 16, kN = 16, kK = 16;

int a_row(int lane, int) { return lane % 16; }
int a_col(int lane, int e) { return 4 * (lane / 16) + 2 * (e / 2) + e % 2; }
int b_row(int lane, int e) { return 4 * (lane / 16) + 2 * (e / 2) + e % 2; }
int b_col(int lane, int) { return lane % 16; }
int cd_row(int lane, int g) { return 4 * (lane / 16) + g; }
int cd_col(int lane, int) { return lane % 16; }

// fp16 -> fp32 of every bit pattern, made once: without F16C the host converts _Float16 in a
// library routine, which cost a fifth of the emulator's time.
const float* half_to_float() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t bits = 0; bits < 65536; ++bits) {
      const uint16_t b = uint16_t(bits);
      _Float16 h;
      std::memcpy(&h, &b, 2);
      t[bits] = float(h);
    }
    return t;
  }();
  return table.data();
}

float widen(MfmaInput input, uint16_t bits) {
  if (input == MfmaInput::kF16) return half_to_float()[bits];
  const uint32_t word = uint32_t(bits) << 16;  // bf16 is the top half of an fp32
  float f;
  std::memcpy(&f, &word, 4);
  return f;
}

// The wave operation's combine step (run() has checked that all 64 lanes take part).
template <MfmaInput kInput>
void combine(const void* ins, void* outs, int) {
  mfma_16x16x16(kInput, static_cast<const MfmaLane*>(ins), static_cast<float(*)[4]>(outs));
}

Float4 run(MfmaInput input, const uint16_t (&a)[4], const uint16_t (&b)[4], Float4 c, int cbsz, int abid, int blgp,
           const char* file, int line) {
  Workgroup& wg = Workgroup::current();
  const WaveOp op = input == MfmaInput::kF16 ? WaveOp::kMfmaF16 : WaveOp::kMfmaBf16;
  if (cbsz != 0 || abid != 0 || blgp != 0)
    wg.fail(std::string(wave_op_name(op)) + ": CBSZ, ABID and BLGP must be 0 (CDNA3 has no such modifiers for it)");
  if (wg.block_dim() - (wg.thread_id() - wg.thread_id() % kWaveSize) < kWaveSize)
    wg.fail(std::string(wave_op_name(op)) + " in a partial wave: the instruction needs all 64 lanes");
  MfmaLane lane{};
  std::memcpy(lane.a, a, sizeof(lane.a));
  std::memcpy(lane.b, b, sizeof(lane.b));
  for (int e = 0; e < 4; ++e) lane.c[e] = c[e];
  struct D {
    float d[4];
  };
  const Combine combine_fn = input == MfmaInput::kF16 ? &combine<MfmaInput::kF16> : &combine<MfmaInput::kBF16>;
  const D d = wg.wave_op<MfmaLane, D>(op, Site{file, line}, lane, combine_fn);
  return Float4{d.d[0], d.d[1], d.d[2], d.d[3]};
}

}  // namespace

void mfma_16x16x16(MfmaInput input, const MfmaLane lanes[64], float d[64][4]) {
  float A[kM][kK], B[kK][kN];
  double acc[kM][kN];
  for (int l = 0; l < kWaveSize; ++l)
    for (int e = 0; e < 4; ++e) {
      A[a_row(l, e)][a_col(l, e)] = widen(input, lanes[l].a[e]);
      B[b_row(l, e)][b_col(l, e)] = widen(input, lanes[l].b[e]);
      acc[cd_row(l, e)][cd_col(l, e)] = lanes[l].c[e];
    }
  // Products of two f16 or bf16 values are exact in fp32; the sum is formed in double and
  // rounded to fp32 once. The hardware's adder tree is not specified by the ISA guide: its
  // rounding can differ from this in the last bits.
  for (int i = 0; i < kM; ++i)
    for (int k = 0; k < kK; ++k) {
      const double a = A[i][k];
      for (int j = 0; j < kN; ++j) acc[i][j] += a * double(B[k][j]);
    }
  for (int l = 0; l < kWaveSize; ++l)
    for (int g = 0; g < 4; ++g) d[l][g] = float(acc[cd_row(l, g)][cd_col(l, g)]);
}

Float4 mfma_f32_16x16x16_f16(Half4 a, Half4 b, Float4 c, int cbsz, int abid, int blgp, const char* file, int line) {
  uint16_t ra[4], rb[4];
  for (int e = 0; e < 4; ++e) {
    const _Float16 x = a[e], y = b[e];
    std::memcpy(&ra[e], &x, 2);
    std::memcpy(&rb[e], &y, 2);
  }
  return run(MfmaInput::kF16, ra, rb, c, cbsz, abid, blgp, file, line);
}

Float4 mfma_f32_16x16x16_bf16_1k(Short4 a, Short4 b, Float4 c, int cbsz, int abid, int blgp, const char* file,
                                 int line) {
  uint16_t ra[4], rb[4];
  for (int e = 0; e < 4; ++e) {
    ra[e] = uint16_t(a[e]);
    rb[e] = uint16_t(b[e]);
  }
  return run(MfmaInput::kBF16, ra, rb, c, cbsz, abid, blgp, file, line);
}

}  // namespace chiplet_fa::emu
