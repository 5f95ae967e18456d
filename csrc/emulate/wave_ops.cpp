#include "emulate/wave_ops.h"

#include "emulate/workgroup.h"

namespace chiplet_fa::emu {
namespace {

template <typename T>
struct ShflIn {
  T value;
  int32_t mask, width;
};

template <typename T>
void combine_shfl_xor(const void* ins, void* outs, int lanes) {
  const auto* in = static_cast<const ShflIn<T>*>(ins);
  T* out = static_cast<T*>(outs);
  for (int l = 0; l < lanes; ++l) {
    const int segment_end = (l + in[l].width) & ~(in[l].width - 1);
    const int src = l ^ in[l].mask;
    out[l] = src >= segment_end || src >= lanes ? in[l].value : in[src].value;
  }
}

void combine_any(const void* ins, void* outs, int lanes) {
  const auto* in = static_cast<const int*>(ins);
  int any = 0;
  for (int l = 0; l < lanes; ++l) any |= in[l] != 0;
  for (int l = 0; l < lanes; ++l) static_cast<int*>(outs)[l] = any;
}

template <typename T>
T shfl_xor(T value, int lane_mask, int width, const char* file, int line) {
  Workgroup& wg = Workgroup::current();
  if (width < 1 || width > kWaveSize || (width & (width - 1)) != 0)
    wg.fail("__shfl_xor width must be a power of two up to 64, got " + std::to_string(width));
  return wg.wave_op<ShflIn<T>, T>(WaveOp::kShflXor, Site{file, line}, ShflIn<T>{value, lane_mask, width},
                                  &combine_shfl_xor<T>);
}

}  // namespace

uint32_t shfl_xor32(uint32_t value, int lane_mask, int width, const char* file, int line) {
  return shfl_xor(value, lane_mask, width, file, line);
}

uint64_t shfl_xor64(uint64_t value, int lane_mask, int width, const char* file, int line) {
  return shfl_xor(value, lane_mask, width, file, line);
}

int any(int predicate, const char* file, int line) {
  return Workgroup::current().wave_op<int, int>(WaveOp::kAny, Site{file, line}, predicate, &combine_any);
}

}  // namespace chiplet_fa::emu
