// Devices as the Python side names them ("cpu", "cuda", "cuda:1").
#pragma once
#include <string>

namespace chiplet_fa {

struct DeviceName {
  bool gpu;       // "cuda" (a CUDA or ROCm GPU); every other torch device type runs the CPU path
  int index;      // -1: none given (the current GPU)
  std::string text;
};

// Parses torch's spelling, "<type>" or "<type>:<index>"; ValueError for anything else.
DeviceName parse_device(const std::string& device);

// The GPU ordinal a "cuda" device names: its index, else (a GPU build) the current device.
int gpu_ordinal(const DeviceName& device);

}  // namespace chiplet_fa
