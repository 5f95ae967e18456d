// The emulator's hook in the kernels' global -> LDS copy (CFA_TRACE_GLOBAL_READ in
// arch/cdna3.h's copy_16B_async; a no-op in the HIP and CUDA builds). Every read of a launch
// that declared its regions must be 16-byte aligned (the bindings promise it: 16-byte pieces of
// rows whose head dim is padded to a multiple of 8) and lie within one row of one region; a
// read that is not fails the workgroup. While a trace session is open the read is recorded.
#pragma once
#include <cstddef>

namespace chiplet_fa::emu {

void global_read(const void* address, size_t bytes);

}  // namespace chiplet_fa::emu
