// What one emulated kernel launch is: the grid, the workgroup size, the LDS it asks for, the
// kernel with its arguments (type-erased), and the global memory the kernel may read through the
// copy path (regions.h). run_grid() runs every workgroup: in parallel over the host's threads
// (as many as torch's intra-op setting), each workgroup start to end on one of them (workgroup.h). CFA_LAUNCH
// (emulate/emulated_platform.h) builds a Launch from the kernel call.
#pragma once
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "emulate/regions.h"

namespace chiplet_fa::emu {

// gfx942: at most 1024 work-items and 64 KB of LDS per workgroup. A grid's x extent stops at
// 2^31 - 1 workgroups, y and z at 65535 (HIP and CUDA alike).
constexpr int kMaxBlockThreads = 1024;
constexpr size_t kLdsBytes = 64 * 1024;
constexpr int64_t kMaxGridX = (int64_t(1) << 31) - 1, kMaxGridYZ = 65535;

struct Launch {
  const char* where;  // the function that launched (its __PRETTY_FUNCTION__)
  const char* what;   // the kernel expression as written
  unsigned grid_dims[3], block_dims[3];  // as the launch asked for them, checked against the limits
  size_t lds_bytes;   // dynamic LDS per workgroup
  void (*body)(const void* call);  // runs the kernel for the calling work-item
  const void* call;
  std::vector<Region> regions;  // readable through the copy path; empty: unchecked
  int trace_slot = -1;          // set by run_grid while a trace session is open (access_trace.h)

  // Workgroups, numbered x fastest as the dispatcher deals them (blockIdx.x = id % grid_x(),
  // blockIdx.y = id / grid_x()), and work-items per workgroup (1-D, run_grid checks).
  int64_t grid() const { return int64_t(grid_dims[0]) * grid_dims[1]; }
  int64_t grid_x() const { return grid_dims[0]; }
  int block() const { return int(block_dims[0]); }
};

// Runs the whole grid; throws std::runtime_error naming the kernel, workgroup and threads when
// the kernel deadlocks, diverges at a wave operation or reads outside its regions, and before any
// workgroup runs when the launch exceeds the hardware's limits, as a GPU's runtime refuses it
// ("invalid configuration argument").
void run_grid(const Launch& launch);

// The global memory a kernel argument lets the kernel read (overloads in params_regions.h for
// the attention params; nothing for other arguments).
template <typename T>
void add_regions(std::vector<Region>&, const T&) {}

// CFA_LAUNCH's target: the kernel and a copy of its arguments, run once per work-item. Grid and
// Block are dim3 (emulate/emulated_platform.h).
template <typename Grid, typename Block, typename... Params, typename... Args>
void launch(const char* where, const char* what, void (*kernel)(Params...), const Grid& grid, const Block& block,
            size_t lds_bytes, Args&&... args) {
  struct Call {
    void (*kernel)(Params...);
    std::tuple<std::decay_t<Params>...> args;
  };
  const Call call{kernel, {std::forward<Args>(args)...}};
  Launch l{where, what, {grid.x, grid.y, grid.z}, {block.x, block.y, block.z}, lds_bytes,
           [](const void* c) {
             const Call& self = *static_cast<const Call*>(c);
             std::apply(self.kernel, self.args);
           },
           &call, {}};
  (add_regions(l.regions, args), ...);
  run_grid(l);
}

}  // namespace chiplet_fa::emu
