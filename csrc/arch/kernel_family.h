// The kernel families a library can hold, one per matrix-unit generation. Host code names them
// (ops/gpu/device_family.h picks one per device); a kernel translation unit belongs to exactly
// one (arch/family.h).
#pragma once
#include <cstdint>

namespace chiplet_fa {

enum class KernelFamily : int32_t { kMmaSync, kSm90, kCdna3 };

constexpr const char* family_name(KernelFamily f) {
  return f == KernelFamily::kSm90 ? "sm90" : f == KernelFamily::kCdna3 ? "cdna3" : "mma_sync";
}

}  // namespace chiplet_fa
