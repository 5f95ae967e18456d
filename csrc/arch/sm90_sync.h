// sm_90 synchronisation for warp-specialised kernels: transaction barriers in shared memory
// (mbarrier) between the producer and consumer warpgroups, named barriers between consumer
// warpgroups, and register reallocation between warpgroups (setmaxnreg).
#pragma once
#include <cstdint>

#include "nvidia_common.h"

namespace chiplet_fa::CFA_FAMILY::arch {

CFA_DEVICE void mbarrier_init(uint64_t* bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(arrivals) : "memory");
}
CFA_DEVICE void mbarrier_arrive(uint64_t* bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(smem_u32(bar))
               : "memory");
}
// Counts as this thread's arrival once all of its earlier cp.async copies have landed.
CFA_DEVICE void mbarrier_arrive_on_copies(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
// Waits until the phase of the given parity has completed (phases alternate 0, 1, 0, ...).
CFA_DEVICE void mbarrier_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait_again:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_again;\n}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
}
CFA_DEVICE void copy_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// Shared memory written through the generic proxy (cp.async, st.shared), then read by wgmma
// (the async proxy), needs this fence between the two.
CFA_DEVICE void fence_async_proxy() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Named barriers: `threads` (a multiple of 32) counts both the syncing and the arriving ones.
CFA_DEVICE void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
CFA_DEVICE void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Registers a thread gets at launch (allocation granule 8); setmaxnreg moves registers within
// this pool, so a claim beyond it waits forever.
constexpr int launch_registers(int threads) { return 65536 / threads / 8 * 8; }
// The shape of a warp-specialised workgroup: one producer warpgroup and kConsumers consumer
// warpgroups, between which setmaxnreg splits the registers.
template <int kConsumerGroups, int kProducerRegisters, int kConsumerRegisters>
struct WarpSpecialised {
  static constexpr int kWgThreads = 128;
  static constexpr int kConsumers = kConsumerGroups;
  static constexpr int kThreads = (1 + kConsumers) * kWgThreads;
  static constexpr int kProducerRegs = kProducerRegisters, kConsumerRegs = kConsumerRegisters;
  static_assert(kProducerRegs * kWgThreads + kConsumerRegs * kConsumers * kWgThreads <=
                    launch_registers(kThreads) * kThreads,
                "register reallocation exceeds the pool the workgroup launched with");
};

template <int kRegs>
CFA_DEVICE void release_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
CFA_DEVICE void claim_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

}  // namespace chiplet_fa::CFA_FAMILY::arch
