// Policy names as users write them, shared by the op, pybind11 and error messages.
#pragma once
#include <string>

#include <c10/util/Exception.h>

#include "mapping.h"

namespace chiplet_fa {

constexpr const char* kMappingNames[kNumMappings] = {"block_first", "head_first",
                                                     "swizzled_block_first",
                                                     "swizzled_head_first"};

// "auto" resolves here: keep each ACC inside one L2 domain where there are several, else walk
// heads in order (on a monolithic L2 head-first is what keeps one head's K/V resident).
inline Mapping resolve_mapping(const std::string& name, int num_xcds) {
  if (name == "auto") return num_xcds > 1 ? Mapping::kSwizzledHeadFirst : Mapping::kHeadFirst;
  for (int i = 0; i < kNumMappings; ++i)
    if (name == kMappingNames[i]) return static_cast<Mapping>(i);
  TORCH_CHECK_VALUE(false,
                    "mapping must be one of 'auto', 'block_first', 'head_first', "
                    "'swizzled_block_first', 'swizzled_head_first'; got '", name, "'");
}

}  // namespace chiplet_fa
