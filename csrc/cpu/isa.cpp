#include "cpu/isa.h"

#include <cstdlib>
#include <string>

namespace chiplet_fa {
namespace {

#if defined(__x86_64__)
// What torch's CPU dispatch finds (aten/src/ATen/native/DispatchStub.cpp, through cpuinfo): AVX-512
// with the VL, BW and DQ extensions and FMA, or AVX2 with FMA. (torch's stable ABI does not expose
// at::get_cpu_capability.)
CpuIsa supported() {
  __builtin_cpu_init();
  const bool fma = __builtin_cpu_supports("fma");
  if (fma && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq"))
    return CpuIsa::kAvx512;
  if (fma && __builtin_cpu_supports("avx2")) return CpuIsa::kAvx2;
  return CpuIsa::kBase;
}

// ATEN_CPU_CAPABILITY lowers it, as it does torch's ("default", "avx2", "avx512").
CpuIsa lowered(CpuIsa isa) {
  const char* env = std::getenv("ATEN_CPU_CAPABILITY");
  const std::string cap = env ? env : "";
  if (cap == "default") return CpuIsa::kBase;
  if (cap == "avx2" && isa == CpuIsa::kAvx512) return CpuIsa::kAvx2;
  return isa;
}
#endif

}  // namespace

CpuIsa cpu_isa() {
#if defined(__x86_64__)
  static const CpuIsa isa = lowered(supported());
  return isa;
#else
  return CpuIsa::kBase;
#endif
}

}  // namespace chiplet_fa
