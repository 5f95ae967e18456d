// sm_90 bulk groups: a thread's asynchronous bulk operations (here the TMA reductions of
// arch/sm90_tma.h, by which the copy engine adds a workgroup's partial dQ into global memory in a
// few instructions instead of one atomic per element) are committed as a group and waited for.
// Shared memory written by threads must be fenced for the async proxy (fence_async_proxy)
// before a bulk operation reads it, and stays in use until bulk_wait_read says it was read.
#pragma once
#include <cstdint>

#include "nvidia_common.h"

namespace chiplet_fa::CFA_FAMILY::arch {

CFA_DEVICE void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// This thread's bulk groups but the newest kPending have read their shared memory.
template <int kPending>
CFA_DEVICE void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}
// This thread's bulk groups are complete (their global writes done).
CFA_DEVICE void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

// g[0] += a, g[1] += b in global memory (8-byte aligned), one vector reduction in L2.
CFA_DEVICE void red_add_v2(float* g, float a, float b) {
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(g), "f"(a), "f"(b) : "memory");
}

}  // namespace chiplet_fa::CFA_FAMILY::arch
