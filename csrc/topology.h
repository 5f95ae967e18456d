// How many L2 domains (XCDs) the device dispatches workgroups over, round-robin.
#pragma once
#include <c10/core/Device.h>

namespace chiplet_fa {

// CPU and NVIDIA GPUs have one L2 domain.
int detect_num_xcds(const c10::Device& device);

}  // namespace chiplet_fa
