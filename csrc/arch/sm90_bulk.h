// sm_90 bulk asynchronous reductions: the copy engine adds a contiguous run of fp32 values from
// shared memory into global memory, element-wise and atomically, so a workgroup's partial dQ
// reaches the accumulator in a few instructions instead of one atomic per element.
// Shared memory written by threads must be fenced for the async proxy (fence_async_proxy)
// before the reduction reads it, and stays in use until bulk_wait_read says it was read.
#pragma once
#include <cstdint>

#include "nvidia_common.h"

namespace chiplet_fa::CFA_FAMILY::arch {

// bytes: a multiple of 16; both addresses 16-byte aligned.
CFA_DEVICE void bulk_reduce_add(float* gmem, const float* smem, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(gmem),
               "r"(smem_u32(smem)), "r"(bytes)
               : "memory");
}
CFA_DEVICE void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// This thread's bulk groups but the newest kPending have read their shared memory.
template <int kPending>
CFA_DEVICE void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}
// This thread's bulk groups are complete (their global writes done).
CFA_DEVICE void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

}  // namespace chiplet_fa::CFA_FAMILY::arch
