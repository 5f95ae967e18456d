// The platform layer of an emulated build (CHIPLET_FA_EMULATE=cdna3, CFA_EMULATE), included at
// the end of csrc/platform.h: what it provides under HIP, for kernels compiled as host C++ and
// run by the emulator. There is one implicit stream: a launch returns when its grid has run.
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>

#include "emulate/kernel_launch.h"

#define CFA_GLOBAL
#define __launch_bounds__(...)

using cfaStream_t = void*;

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

namespace chiplet_fa::emu {
unsigned char* lds();
void global_read(const void* address, size_t bytes);
}  // namespace chiplet_fa::emu

// Input the kernels cannot read safely, found in a kernel: the launch raises it (a GPU traps).
[[noreturn]] inline void device_fail(const char* what) { throw std::runtime_error(std::string("chiplet_fa: ") + what); }

// The running workgroup's LDS (64 KB, poisoned before the workgroup starts; workgroup.h).
CFA_DEVICE unsigned char* dynamic_smem() { return ::chiplet_fa::emu::lds(); }

#define CFA_LAUNCH(kernel, grid, block, smem_bytes, stream, ...) \
  ::chiplet_fa::emu::launch(__PRETTY_FUNCTION__, #kernel, kernel, grid, block, smem_bytes, __VA_ARGS__)

// The copy path's global reads, checked and traced (emulate/global_memory.h).
#define CFA_CHECK_GLOBAL_READ(address, bytes) ::chiplet_fa::emu::global_read(address, bytes)
