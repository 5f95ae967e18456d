// The CPU op's route to the emulated CDNA3 kernels in a build with CHIPLET_FA_EMULATE=cdna3
// (csrc/emulate/): float16/bfloat16 calls whose head dim a built cdna3 instantiation covers run
// those kernels through the GPU bindings' code (ops/kernel_binding.h), on the host; every other
// call stays on the CPU reference kernels (csrc/cpu/), which call these first.
#pragma once
#include <tuple>

#include <ATen/core/Tensor.h>

#include "ops/bwd_api.h"
#include "ops/fwd_api.h"

namespace chiplet_fa {

bool emulated_fwd_takes(const at::Tensor& q);
bool emulated_bwd_takes(const at::Tensor& q);
std::tuple<at::Tensor, at::Tensor> emulated_fwd(const FwdArgs& args);
std::tuple<at::Tensor, at::Tensor, at::Tensor> emulated_bwd(const BwdArgs& args);

}  // namespace chiplet_fa
