// How workgroups reach an L2 domain and when they run, shared by the simulator and the
// closed form. Domain d of D (round-robin dispatch) receives wids d, d+D, d+2D, ...: its
// dispatch queue. The domain has S = CUs x workgroups-per-CU slots. In steady state slot s
// starts work floor(s * stagger) K/V-step times (see effective_stagger) after slot 0 and, when its workgroup ends,
// takes the next one of the queue at once, so queue position p runs in slot p % S.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "mapping/mapping.h"
#include "topology_presets.h"
#include "workload.h"

namespace chiplet_fa::locality {

inline int64_t dispatch_domains(const Topology& t) {
  return t.dispatch == Dispatch::kRoundRobin ? t.num_domains : 1;
}

// Workgroups that domain d of n receives from a grid of `grid` under round-robin dispatch.
inline int64_t queue_length(int64_t grid, int64_t d, int64_t n) {
  return grid / n + (d < grid % n ? 1 : 0);
}

inline Tile queue_tile(Mapping policy, const GridShape& g, int64_t d, int64_t n, int64_t pos) {
  return map_workgroup(policy, pos * n + d, g);
}

// The longest-first sections the kernels run on this topology (mapping.h): on a monolithic L2 the
// persistent sm90 forward sizes them for one worker per slot; the kernels of round-robin hardware
// launch a workgroup per tile and reverse each row (1).
inline int32_t modelled_section_rows(const Topology& t, const AttnShape& s) {
  if (t.dispatch != Dispatch::kSingle || s.batch <= 0) return 1;
  int64_t total_q = 0;
  for (int64_t b = 0; b < s.batch; ++b) total_q += s.len_q(b);
  return longest_first_section_rows(s.batch * s.num_q_heads, mean_row_blocks(total_q, s.batch, s.block_m),
                                    t.slots_per_domain(), 2 * s.seqlen_k * s.head_dim * s.elem_bytes, s.group(),
                                    t.l2_bytes);
}

// A validated call's grid (a ragged one points into `offsets`, hence no copies) and the
// topology's dispatch domains: what the simulator and the closed form start from.
struct DispatchedGrid {
  std::vector<int32_t> offsets;
  GridShape grid;
  int64_t domains;

  DispatchedGrid(const Topology& topo, const AttnShape& shape, int mapping_xcds) {
    validate(topo);
    validate(shape);
    grid = shape.grid_shape(mapping_xcds, offsets, modelled_section_rows(topo, shape));
    domains = dispatch_domains(topo);
  }
  DispatchedGrid(const DispatchedGrid&) = delete;
  DispatchedGrid& operator=(const DispatchedGrid&) = delete;
  int64_t queue_length(int64_t d) const { return locality::queue_length(grid_size(grid), d, domains); }
};

// Slot phases spread over at most one workgroup length: beyond that, starts are as evenly
// spread as they can be (T / S apart), whatever the stagger.
inline double effective_stagger(const Topology& t, const AttnShape& s) {
  return std::min(t.stagger_steps, s.mean_steps() / double(t.slots_per_domain()));
}

inline int64_t slot_phase(int64_t slot, double stagger_steps) {
  return int64_t(std::floor(double(slot) * stagger_steps));
}

// K/V tile pairs (one K and one V tile of one step, read together) that fit in one domain.
inline int64_t pair_capacity(const Topology& t, const AttnShape& s) {
  return t.l2_bytes / (2 * s.kv_tile_bytes(t.line_bytes));
}

// The L2 seen at tile-pair granularity: `sets` sets of `ways` pairs (none when not one fits).
struct PairGeometry {
  int64_t sets = 0;
  int ways = 0;
};

inline PairGeometry pair_geometry(const Topology& t, const AttnShape& s) {
  const int64_t capacity = pair_capacity(t, s);
  if (capacity <= 0) return {};
  const int ways = int(std::min<int64_t>(t.ways, capacity));
  return {capacity / ways, ways};
}

}  // namespace chiplet_fa::locality
