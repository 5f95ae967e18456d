// The instruction set the CPU kernels run with. The extension is compiled for the compiler's
// baseline (x86-64: SSE2, no FMA); the kernels are compiled again for AVX2 and AVX-512 through the
// target attribute, and each call takes the set torch's own CPU kernels take: what the CPU has,
// unless ATEN_CPU_CAPABILITY lowers it. (-march flags would make the library need that CPU.)
#pragma once
#include "cpu/block_math.h"

namespace chiplet_fa {

enum class CpuIsa { kBase, kAvx2, kAvx512 };

// What torch.backends.cpu.get_cpu_capability() says (the CPU, lowered by ATEN_CPU_CAPABILITY), read once.
CpuIsa cpu_isa();

#if defined(__x86_64__)
// flatten inlines body into these (and the kernel functions are CFA_CPU_INLINE), so the kernel's
// loops are compiled for their target; helpers shared with the baseline code, where not inlined,
// stay baseline.
template <typename Body>
__attribute__((target("avx512f,avx2,fma"), flatten)) void on_avx512(const Body& body) {
  body(IsaAvx512{});
}
template <typename Body>
__attribute__((target("avx2,fma"), flatten)) void on_avx2(const Body& body) {
  body(IsaAvx2{});
}
#endif

// body(Isa{}), compiled for the instruction set cpu_isa() names.
template <typename Body>
void with_cpu_isa(const Body& body) {
#if defined(__x86_64__)
  switch (cpu_isa()) {
    case CpuIsa::kAvx512: return on_avx512(body);
    case CpuIsa::kAvx2: return on_avx2(body);
    case CpuIsa::kBase: break;
  }
#endif
  body(IsaBase{});
}

}  // namespace chiplet_fa
