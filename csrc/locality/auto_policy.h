// mapping="auto": the policy the closed-form L2 model predicts best for a shape on a topology,
// cached per (shape, topology). Framework-free.
#pragma once
#include <array>

#include "model.h"

namespace chiplet_fa::locality {

struct AutoChoice {
  Mapping mapping;
  Topology topology;
  // Closed-form prediction for every policy (index = Mapping value), swizzled with
  // topology.num_domains XCDs; `candidate` marks the policies considered.
  std::array<Traffic, kNumMappings> predicted;
  std::array<bool, kNumMappings> candidate;
};

// On one L2 domain the swizzled policies equal the naive ones and are not candidates. The
// policy with the least predicted DRAM read traffic wins; within 1% of it, the first in the
// order swizzled_head_first, head_first, swizzled_block_first, block_first.
AutoChoice choose_mapping(const AttnShape& shape, const Topology& topo);
// The same for the device topology inferred from a detected domain count.
AutoChoice choose_mapping(const AttnShape& shape, int num_domains);

}  // namespace chiplet_fa::locality
