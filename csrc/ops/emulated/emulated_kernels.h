// The CPU op's route to the emulated CDNA3 kernels in a build with CHIPLET_FA_EMULATE=cdna3
// (csrc/emulate/): float16/bfloat16 calls whose head dim a built cdna3 instantiation covers run
// those kernels through the GPU bindings' code (ops/kernel_binding.h), on the host; every other
// call stays on the CPU reference kernels (csrc/cpu/), which call these first.
#pragma once
#include <optional>
#include <utility>

#include "arch/dtype.h"
#include "ops/op_entry.h"
#include "ops/stable_tensor.h"

namespace chiplet_fa {

// Whether a built cdna3 forward covers float16/bfloat16 calls of this head dim.
bool emulated_fwd_covers(DType dtype, int64_t head_dim);
bool emulated_fwd_takes(const Tensor& q);
bool emulated_bwd_takes(const Tensor& q);
FwdResult emulated_fwd(const FwdArgs& args, const OptTensor& given_out);
BwdResult emulated_bwd(const BwdArgs& args);

// (block_m, block_n) of the built cdna3 forward for `dtype` that covers `head_dim` (the binding
// pads it to a multiple of 8 and runs the smallest instantiation that covers that), from
// kernels/tile_sizes.h: what the K/V access stream of a trace is cut into. (0, 0) when none does.
std::pair<int, int> emulated_fwd_tile(DType dtype, int head_dim);

}  // namespace chiplet_fa
