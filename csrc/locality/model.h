// L2 locality model of the FA2 forward: predicted L2 hit rate and DRAM traffic of one mapping
// policy on one topology. Two estimators share the dispatch model in dispatch.h:
//   simulate() replays every K/V tile read through per-domain set-associative LRU caches;
//   estimate() is the closed form (reuse working set vs L2 capacity), cheap enough for "auto".
// Framework-free.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "mapping/mapping.h"
#include "topology_presets.h"
#include "workload.h"

namespace chiplet_fa::locality {

struct Traffic {
  int64_t kv_read_bytes = 0;  // K and V tile reads issued by all workgroups
  int64_t kv_hit_bytes = 0;   // of which served by L2
  int64_t q_read_bytes = 0;   // Q tiles: each read once, always from DRAM
  int64_t o_write_bytes = 0;  // O tiles: written once; L2 absorbs writes (counted as hits)

  int64_t dram_read_bytes() const { return kv_read_bytes - kv_hit_bytes + q_read_bytes; }
  // All L2 traffic, like Nsight's lts__t_sector_hit_rate (reads and writes).
  double hit_rate() const {
    const int64_t all = kv_read_bytes + q_read_bytes + o_write_bytes;
    return all ? double(kv_hit_bytes + o_write_bytes) / double(all) : 0.0;
  }
  double kv_hit_rate() const { return kv_read_bytes ? double(kv_hit_bytes) / double(kv_read_bytes) : 0.0; }
  Traffic& operator+=(const Traffic& o) {
    kv_read_bytes += o.kv_read_bytes;
    kv_hit_bytes += o.kv_hit_bytes;
    q_read_bytes += o.q_read_bytes;
    o_write_bytes += o.o_write_bytes;
    return *this;
  }
};

// mapping_xcds: the num_xcds the mapping is computed with (the kernel's argument); it may
// differ from topology.num_domains (e.g. swizzling for 8 XCDs on a monolithic L2).
// progress, when set, is called with (work done, total work) from the calling thread.
Traffic simulate(const Topology& topo, const AttnShape& shape, Mapping policy, int mapping_xcds,
                 const std::function<void(int64_t, int64_t)>& progress = {});
Traffic estimate(const Topology& topo, const AttnShape& shape, Mapping policy, int mapping_xcds);

// A workgroup as the simulator replays it: the Q bytes it reads and its K/V tile pairs in the
// order it reads them, each keyed acc * num_n_blocks + n_block (acc: AttnShape::acc_of).
struct WorkgroupStream {
  int64_t q_bytes = 0;
  std::vector<int64_t> pairs;
};
// Per dispatch domain, its workgroups in dispatch order.
using DomainStreams = std::vector<std::vector<WorkgroupStream>>;

// The streams simulate() replays: the model's own trace of the forward.
DomainStreams model_streams(const Topology& topo, const AttnShape& shape, Mapping policy, int mapping_xcds);
// simulate() on given streams (one per dispatch domain of topo), e.g. those an emulated kernel
// read (chiplet_fa.emulate), instead of the model's own.
Traffic simulate_streams(const Topology& topo, const AttnShape& shape, const DomainStreams& streams);

}  // namespace chiplet_fa::locality
