// The cross-lane operations the kernels use, over the 64 lanes of a wave: each is a wave
// operation (workgroup.h), so every lane must reach it, from the same call site, before any
// lane gets its result. device.h maps HIP's __shfl_xor and __any onto these.
#pragma once
#include <cstdint>

namespace chiplet_fa::emu {

// HIP's __shfl_xor: lane l gets the value of lane l ^ lane_mask, unless that lane lies beyond
// l's segment of `width` lanes, in which case it keeps its own. Bit patterns of 4 or 8 bytes.
uint32_t shfl_xor32(uint32_t value, int lane_mask, int width, const char* file, int line);
uint64_t shfl_xor64(uint64_t value, int lane_mask, int width, const char* file, int line);
// HIP's __any: nonzero on every lane when the predicate is nonzero on any lane of the wave.
int any(int predicate, const char* file, int line);

}  // namespace chiplet_fa::emu
