// Devices as the Python side names them ("cpu", "cuda", "cuda:1"), and the calls the module makes
// into the torch-facing code for a GPU, by ordinal (device_adapter.cpp).
#pragma once
#include <string>

#include "arch/dtype.h"
#include "mapping/topology.h"

namespace chiplet_fa {

struct DeviceName {
  bool gpu;       // "cuda" (a CUDA or ROCm GPU); every other torch device type runs the CPU path
  int index;      // -1: none given (the current GPU)
  std::string text;
};

// Parses torch's spelling, "<type>" or "<type>:<index>"; ValueError for anything else.
DeviceName parse_device(const std::string& device);

namespace gpu {
std::string kernel_path(int device_index);
int detect_num_xcds(int device_index);
XcdDetection detect_xcds(int device_index);
int fwd_tile_rows(DType dtype, int head_dim, int device_index);
}  // namespace gpu

}  // namespace chiplet_fa
