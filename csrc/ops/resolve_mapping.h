// The mapping a call runs with, from the name the user passed. "auto" asks the L2 locality model
// for the policy it predicts best for the attention shape on a device with num_xcds L2 domains
// (cached per shape); resolving it here keeps the mapping layer free of the model.
#pragma once
#include <string>

#include "locality/auto_policy.h"
#include "mapping/mapping_names.h"
#include "ops/stable_tensor.h"

namespace chiplet_fa {

inline Mapping resolve_mapping(const std::string& name, int num_xcds, const locality::AttnShape& shape) {
  if (name == "auto") return locality::choose_mapping(shape, num_xcds).mapping;
  const std::optional<Mapping> m = mapping_by_name(name);
  check_value(m.has_value(), "mapping must be one of 'auto', 'block_first', 'head_first', "
                 "'swizzled_block_first', 'swizzled_head_first'; got '", name, "'");
  return *m;
}

}  // namespace chiplet_fa
