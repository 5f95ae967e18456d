// Policy names as users write them, shared by the op, pybind11 and error messages.
#pragma once
#include <string>

#include <c10/util/Exception.h>

#include "locality/auto_policy.h"
#include "mapping.h"

namespace chiplet_fa {

constexpr const char* kMappingNames[kNumMappings] = {"block_first", "head_first",
                                                     "swizzled_block_first",
                                                     "swizzled_head_first"};

// A policy by name; "auto" asks the L2 locality model (csrc/locality) for the policy it predicts
// best for this attention shape on a device with num_xcds L2 domains (cached per shape).
inline Mapping resolve_mapping(const std::string& name, int num_xcds,
                               const locality::AttnShape& shape) {
  if (name == "auto") return locality::choose_mapping(shape, num_xcds).mapping;
  for (int i = 0; i < kNumMappings; ++i)
    if (name == kMappingNames[i]) return static_cast<Mapping>(i);
  TORCH_CHECK_VALUE(false,
                    "mapping must be one of 'auto', 'block_first', 'head_first', "
                    "'swizzled_block_first', 'swizzled_head_first'; got '", name, "'");
}

}  // namespace chiplet_fa
