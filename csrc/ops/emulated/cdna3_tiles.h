// The forward tile of the cdna3 kernel an emulated call runs, from the kernel's own config
// (FwdConfig in kernels/fwd_kernel.h): what the K/V access stream of a trace is cut into.
#pragma once
#include <utility>

#include "arch/dtype.h"

namespace chiplet_fa {

// (block_m, block_n) of the built cdna3 forward for `dtype` that covers `head_dim` (the
// binding pads it to a multiple of 8 and runs the smallest instantiation that covers that);
// (0, 0) when none does.
std::pair<int, int> emulated_fwd_tile(DType dtype, int head_dim);

}  // namespace chiplet_fa
