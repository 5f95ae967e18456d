// Persistent workers over the mapping's order. A launch of W workers (one workgroup per SM)
// serves the dispatch queues of the L2 domains the mapping assumes (mapping/domain_queues.h):
// worker w, which runs on domain w % X when W is a multiple of X, takes the next id of its
// domain's queue whenever it starts a tile, from a counter per domain (and with fewer workers
// than domains, the queues of the domains no worker runs on, in turn). So each domain walks its
// wids in map_workgroup's order, as one-tile workgroups would, and the workers that finish first
// take the next tile, as the hardware's dispatcher does for one-tile workgroups (and as the L2
// model's schedule assumes). With a causal mask tiles differ in work up to a sequence's length, and
// a fixed share per worker (wid = w + i * W) is unbalanced: counted in key blocks, its slowest
// worker has 8% (H=128, N=8K) to 25% (B=8, H=16, N=2K) more than the mean, and with W = 128 and 64
// m-blocks a head every worker drew the same m-block each time (docs/mapping.md, "Rejected
// alternatives"). A worker keeps its K/V ring, barriers and registers from tile to tile, so the
// next tile's loads overlap the last one's final product and epilogue.
#pragma once
#include <cstdint>

#include "kernels/fwd_params.h"
#include "mapping/domain_queues.h"
#include "platform.h"

namespace chiplet_fa::CFA_FAMILY {

// The domains whose queues the workers serve: those a swizzled mapping assumes, else one.
CFA_HOST_DEVICE int scheduler_domains(const FwdParams& p) {
  return is_swizzled(p.mapping) && p.num_xcds > 1 ? p.num_xcds : 1;
}

// counters: scheduler_domains(p) zeroed int32 before the launch; one walk (mapping/domain_queues.h)
// per worker.
struct DynamicTileScheduler {
  int32_t* counters;
  QueueWalk walk;
  CFA_DEVICE DynamicTileScheduler(int32_t* counters_, int64_t tiles, int domains)
      : counters(counters_), walk(tiles, domains, gridDim.x, blockIdx.x) {}
  // The next wid of this worker's domains, or -1 once their queues are empty.
  CFA_DEVICE int64_t claim() {
    return walk.next([this](int32_t d) { return atomicAdd(counters + d, 1); });
  }
};

// fn(device) for the current device, asked once per device and thread: launches ask the driver
// for what does not change. Each call site's lambda is a type of its own, so its own cache.
template <typename Fn>
inline auto per_device(Fn fn) {
  static thread_local int cached_device = -1;
  static thread_local decltype(fn(0)) cached{};
  int device = 0;
  cudaGetDevice(&device);
  if (device != cached_device) {
    cached = fn(device);
    cached_device = device;
  }
  return cached;
}

// What a persistent launch reads of the current device.
struct DeviceCounts {
  int sms = 0;           // 0: unknown
  int64_t l2_bytes = 0;
};
inline DeviceCounts device_counts() {
  return per_device([](int device) {
    int sms = 0, l2 = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) sms = 0;
    if (cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device) != cudaSuccess) l2 = 0;
    return DeviceCounts{sms, l2};
  });
}

// Workers for at most `tiles` tiles on the current device (mapping/domain_queues.h).
inline int64_t persistent_workers(int64_t tiles, int domains) {
  return persistent_worker_count(tiles, device_counts().sms, domains);
}

// A tail split (kernels/tail_split.h) of `tiles` equal tiles (a dense batch without a window, one
// queue) over `workers`, its slots and counts from p.scratch; p as it was where none applies.
template <typename Kernel>
inline FwdParams with_tail_split(FwdParams p, int64_t tiles, int64_t workers, int domains, cfaStream_t stream) {
  if (!Kernel::kSplits || p.cu_seqlens_q || domains != 1 || !p.scratch.get) return p;
  const FwdTailSplit s = plan_tail_split(tiles, workers, (p.seqlen_k + Kernel::kBlockN - 1) / Kernel::kBlockN);
  if (!s.units) return p;
  const auto scratch = [&p](int64_t bytes) { return p.scratch.get(p.scratch.owner, bytes); };
  const int64_t counts = int64_t(s.tail) * Kernel::kConsumerWarps * int64_t(sizeof(int32_t));
  p.split = s;
  p.split.partials = static_cast<float*>(scratch(2 * int64_t(s.units) * Kernel::kSlotFloats * int64_t(sizeof(float))));
  p.split.done = static_cast<int32_t*>(scratch(counts));
  cfaMemsetAsync(p.split.done, 0, counts, stream);
  return p;
}

}  // namespace chiplet_fa::CFA_FAMILY
