#include "emulate/launch.h"

#include <stdexcept>
#include <string>

#include <ATen/Parallel.h>

#include "emulate/trace.h"
#include "emulate/workgroup.h"

namespace chiplet_fa::emu {
namespace {

void refuse(const Launch& l, const std::string& why) {
  throw std::runtime_error(std::string("chiplet_fa emulator: cannot launch ") + l.what + " from " + l.where + ": " +
                           why);
}

}  // namespace

void run_grid(const Launch& launch) {
  if (launch.grid < 0) refuse(launch, "only 1-D grids and workgroups are emulated");
  if (launch.block < 1 || launch.block > kMaxBlockThreads)
    refuse(launch, "a workgroup has 1 to " + std::to_string(kMaxBlockThreads) + " work-items, asked for " +
                       std::to_string(launch.block));
  if (launch.lds_bytes > kLdsBytes)
    refuse(launch, std::to_string(launch.lds_bytes) + " bytes of LDS asked for, a gfx942 workgroup has " +
                       std::to_string(kLdsBytes));
  Launch l = launch;
  l.trace_slot = trace_launch(l);
  // Workgroups are independent (their only shared state is global memory, and the kernels'
  // cross-workgroup writes are atomics), so the host's threads take them in any order.
  at::parallel_for(0, l.grid, 1, [&](int64_t begin, int64_t end) {
    Workgroup& runner = Workgroup::of_this_thread();
    for (int64_t id = begin; id < end; ++id) runner.run(l, id);
  });
}

}  // namespace chiplet_fa::emu
