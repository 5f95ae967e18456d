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

// Turns between workgroups over a flag in global memory, for reductions that must land in a
// fixed order: a workgroup takes its turn once the flag holds `value` (its predecessor's mark),
// and its bulk reductions issued after that are ordered behind the predecessor's.
CFA_DEVICE void wait_for_turn(const int32_t* flag, int32_t value) {
  int32_t seen;
  do {
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(seen) : "l"(flag) : "memory");
  } while (seen != value);
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}
// Hands the turn on by marking the flag, once this thread's reductions are complete (bulk_wait_all).
CFA_DEVICE void pass_turn(int32_t* flag, int32_t mark) {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
  asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(flag), "r"(mark) : "memory");
}

}  // namespace chiplet_fa::CFA_FAMILY::arch
