#include "cpu/isa.h"

#include <string>

#include <ATen/Version.h>

namespace chiplet_fa {

CpuIsa cpu_isa() {
  static const CpuIsa isa = [] {
#if defined(__x86_64__)
    const std::string capability = at::get_cpu_capability();
    if (capability == "AVX512") return CpuIsa::kAvx512;
    if (capability == "AVX2") return CpuIsa::kAvx2;
#endif
    return CpuIsa::kBase;
  }();
  return isa;
}

}  // namespace chiplet_fa
