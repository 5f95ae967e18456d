// Element types kernels are instantiated for; each arch backend maps them to its own types.
#pragma once
#include <cstdint>

namespace chiplet_fa {

enum class DType : int32_t { kFloat16, kBFloat16, kFloat32, kFloat64 };

}  // namespace chiplet_fa
