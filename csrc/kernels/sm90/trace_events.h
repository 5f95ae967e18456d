// Recording kernels/trace.h's events on the device; in a default build every call compiles to
// nothing and trace_clock() to the constant 0, so the waits it brackets cost no instruction.
#pragma once
#include <cstdint>

#include "arch/nvidia_common.h"
#include "kernels/trace.h"

namespace chiplet_fa::CFA_FAMILY {

// The SM's cycle counter (its low 32 bits: waits inside a workgroup are far shorter).
CFA_DEVICE uint32_t trace_clock() {
  if constexpr (kTrace) return uint32_t(clock64());
  return 0;
}

// Event n of this workgroup's role (a consumer warpgroup, or kTraceWorkgroup), written by one thread.
CFA_DEVICE void trace_event(const TraceSink& sink, int role, int n, TraceKind kind, uint32_t a, uint32_t b = 0,
                            uint32_t c = 0, uint32_t d = 0) {
  if constexpr (kTrace) {
    if (sink.words == nullptr || int(blockIdx.x) >= sink.workgroups || n >= sink.slots) return;
    uint64_t ns;
    uint32_t sm;
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(ns));
    asm volatile("mov.u32 %0, %%smid;\n" : "=r"(sm));
    const int64_t event = (int64_t(blockIdx.x) * kTraceRoles + role) * sink.slots + n;
    uint4* e = reinterpret_cast<uint4*>(sink.words + event * kTraceWords);
    e[0] = make_uint4(uint32_t(ns), uint32_t(ns >> 32), uint32_t(kind) | uint32_t(role) << 8 | sm << 16, blockIdx.x);
    e[1] = make_uint4(a, b, c, d);
  }
}

}  // namespace chiplet_fa::CFA_FAMILY
