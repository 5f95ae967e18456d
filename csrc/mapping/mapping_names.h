// Policy names as users write them, shared by the op, the Python module and error messages.
#pragma once
#include <optional>
#include <string>

#include "mapping/mapping.h"

namespace chiplet_fa {

constexpr const char* kMappingNames[kNumMappings] = {"block_first", "head_first",
                                                     "swizzled_block_first",
                                                     "swizzled_head_first"};

inline std::optional<Mapping> mapping_by_name(const std::string& name) {
  for (int i = 0; i < kNumMappings; ++i)
    if (name == kMappingNames[i]) return static_cast<Mapping>(i);
  return std::nullopt;
}

}  // namespace chiplet_fa
