// The sm90 kernels' scheduling, prepared on the host and asked on the device.
// The forward (FwdTileScheduler): persistent workers over the mapping's order. A launch of W
// workers (one workgroup per SM) serves the dispatch queues of the L2 domains the mapping assumes
// (mapping/domain_queues.h): worker w, which runs on domain w % X when W is a multiple of X, takes
// the next id of its domain's queue whenever it starts a tile, from a counter per domain (and with
// fewer workers than domains, the queues of the domains no worker runs on, in turn). So each domain
// walks its wids in map_workgroup's order, as one-tile workgroups would, and the workers that
// finish first take the next tile, as the hardware's dispatcher does for one-tile workgroups (and
// as the L2 model's schedule assumes). With a causal mask tiles differ in work up to a sequence's
// length, and a fixed share per worker (wid = w + i * W) is unbalanced: counted in key blocks, its
// slowest worker has 8% (H=128, N=8K) to 25% (B=8, H=16, N=2K) more than the mean, and with W = 128
// and 64 m-blocks a head every worker drew the same m-block each time (docs/mapping.md, "Rejected
// alternatives"). A worker keeps its K/V ring, barriers and registers from tile to tile, so the
// next tile's loads overlap the last one's final product and epilogue. The last partial round of
// equal tiles is split over keys (kernels/tail_split.h).
// Both passes' causal grids: longest-first sections (mapping.h) sized for what runs at once, the
// forward's persistent workers, the backward's resident key-block workgroups (one tile each, by
// map_kv_workgroup). Each domain's workers share that domain's part of the L2 (the whole L2 with
// one queue).
#pragma once
#include <cstdint>

#include "kernels/bwd_params.h"
#include "kernels/fwd_params.h"
#include "kernels/tail_split.h"
#include "mapping/domain_queues.h"
#include "platform.h"

namespace chiplet_fa::CFA_FAMILY {

// The domains whose queues the workers serve: those a swizzled mapping assumes, else one.
CFA_HOST_DEVICE int scheduler_domains(const FwdParams& p) {
  return is_swizzled(p.mapping) && p.num_xcds > 1 ? p.num_xcds : 1;
}

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

// The forward's sections: a row is a query head's blocks, reading one KV head's K and V (group
// query heads to one).
inline FwdParams with_sections(FwdParams p, int64_t workers, int domains, int elem_bytes) {
  if (!p.longest_first() || p.batch <= 0) return p;
  const int64_t kv_bytes = 2 * int64_t(p.seqlen_k) * p.head_dim * elem_bytes;
  const int64_t rows = int64_t(p.batch) * p.num_q_heads, blocks = mean_row_blocks(p.total_q, p.batch, p.block_m);
  p.section_rows = longest_first_section_rows(rows, blocks, workers / domains, kv_bytes, p.group_size(),
                                              device_counts().l2_bytes / domains);
  return p;
}

// The backward's key-block grid: a row is a KV head's blocks (or a split's), streaming Q and dO of
// its query heads and adding into their fp32 dQ. `resident` workgroups run at once on the device.
inline BwdParams with_kv_sections(BwdParams p, int64_t resident, int elem_bytes) {
  if (!p.longest_first() || p.batch <= 0 || resident <= 0) return p;
  const int domains = scheduler_domains(p);
  const int64_t row_bytes = p.kv_row_bytes(elem_bytes);
  const int64_t rows = int64_t(p.batch) * p.num_kv_heads * p.kv_split;
  const int64_t blocks = mean_row_blocks(p.total_k, p.batch, p.block_n);
  p.section_rows = longest_first_section_rows(rows, blocks, resident / domains, row_bytes, 1,
                                              device_counts().l2_bytes / domains);
  return p;
}

// The sm90 forward's scheduler for kernel Fwd (kernels/sm90/fwd_kernel_sm90.h): prepare() on the
// host fixes what the workers share, next() on the device hands each worker its next work item.
template <typename Fwd>
struct FwdTileScheduler {
  // Host: p's sections and tail split for a grid of `tiles` tiles, the queues' counters (and the
  // split's) zeroed on `stream` (p.tile_counters: scheduler_domains(p) int32); the workers to launch.
  static int64_t prepare(FwdParams& p, int64_t tiles, cfaStream_t stream) {
    const int domains = scheduler_domains(p);
    const int64_t workers = persistent_worker_count(tiles, device_counts().sms, domains);
    p = with_tail_split(with_sections(p, workers, domains, int(sizeof(typename Fwd::T))), tiles, workers, domains,
                        stream);
    cfaMemsetAsync(p.tile_counters, 0, sizeof(int32_t) * domains, stream);
    return workers;
  }

  // A tail split (kernels/tail_split.h) of `tiles` equal tiles (a dense batch without a window, one
  // queue) over `workers`, its slots and counts from p.scratch; p as it was where none applies.
  static FwdParams with_tail_split(FwdParams p, int64_t tiles, int64_t workers, int domains, cfaStream_t stream) {
    if (!Fwd::kSplits || p.cu_seqlens_q || domains != 1 || !p.scratch.get) return p;
    const FwdTailSplit s = plan_tail_split(tiles, workers, (p.seqlen_k + Fwd::kBlockN - 1) / Fwd::kBlockN);
    if (!s.units) return p;
    const auto scratch = [&p](int64_t bytes) { return p.scratch.get(p.scratch.owner, bytes); };
    const int64_t counts = int64_t(s.tail) * Fwd::kConsumerWarps * int64_t(sizeof(int32_t));
    p.split = s;
    p.split.partials = static_cast<float*>(scratch(2 * int64_t(s.units) * Fwd::kSlotFloats * int64_t(sizeof(float))));
    p.split.done = static_cast<int32_t*>(scratch(counts));
    cfaMemsetAsync(p.split.done, 0, counts, stream);
    return p;
  }

  // Device: worker blockIdx.x of gridDim.x, one walk of the domains' queues (mapping/domain_queues.h)
  // on p.tile_counters; claims from `whole` on are the split's units, one or two pieces each.
  const FwdTailSplit& split;
  int64_t whole;
  int32_t* counters;
  QueueWalk walk;
  TailPiece second{0, 0, 0, -1};  // a unit's second piece, handed out by the call after its first

  CFA_DEVICE FwdTileScheduler(const FwdParams& p, const GridShape& grid)
      : FwdTileScheduler(p, grid, Fwd::kSplits && p.split.units) {}
  // `splits` once, not a member function asked twice: the second ask let the compiler fold the
  // walk's length differently (other SASS).
  CFA_DEVICE FwdTileScheduler(const FwdParams& p, const GridShape& grid, bool splits)
      : split(p.split),
        whole(splits ? split.first : grid_size(grid)),
        counters(p.tile_counters),
        walk(splits ? whole + split.units : whole, scheduler_domains(p), gridDim.x, blockIdx.x) {}

  // The worker's next work item: a wid of the grid in map_workgroup's order (-1: none left, the
  // worker stops) and in `piece` its part (slot -1: the whole tile), the next claim of the queues
  // or the second piece of the unit the last call claimed. An out-parameter, not a returned
  // struct: that one changed the kernel's SASS.
  CFA_DEVICE int64_t next(TailPiece& piece) {
    piece = TailPiece{0, 0, 0, -1};
    int64_t wid;
    if (Fwd::kSplits && second.slot >= 0) {
      piece = second;
      second.slot = -1;
      wid = whole + piece.tile;
    } else {
      // The counters by value: a lambda holding `this` changed the kernel's SASS (its spill slots).
      wid = walk.next([c = counters](int32_t d) { return atomicAdd(c + d, 1); });
      if (Fwd::kSplits && wid >= whole) {
        const int32_t u = int32_t(wid - whole);
        piece = unit_piece(split, u, 0);
        second = unit_piece(split, u, 1);
        if (second.empty()) second.slot = -1;  // the unit ends in its first piece's tile
        wid = whole + piece.tile;
      }
    }
    return wid;
  }
};

}  // namespace chiplet_fa::CFA_FAMILY
