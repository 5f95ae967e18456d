#include "emulate/kernel_launch.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/stable/ops.h>

#include "emulate/access_trace.h"
#include "emulate/workgroup.h"

namespace chiplet_fa::emu {
namespace {

void refuse(const Launch& l, const std::string& why) {
  throw std::runtime_error(std::string("chiplet_fa emulator: cannot launch ") + l.what + " from " + l.where + ": " +
                           why);
}

std::string dims(const unsigned (&d)[3]) {
  return "(" + std::to_string(d[0]) + ", " + std::to_string(d[1]) + ", " + std::to_string(d[2]) + ")";
}

// What the hardware takes, with the runtime's words for what it does not.
void check_limits(const Launch& l) {
  const unsigned(&g)[3] = l.grid_dims;
  const unsigned(&b)[3] = l.block_dims;
  const int64_t threads = int64_t(b[0]) * b[1] * b[2];
  const auto invalid = [&l](const std::string& why) { refuse(l, "invalid configuration argument: " + why); };
  if (g[0] < 1 || g[1] < 1 || g[2] < 1 || g[0] > kMaxGridX || g[1] > kMaxGridYZ || g[2] > kMaxGridYZ)
    invalid("grid " + dims(g) + ", each extent at least 1 and at most (" + std::to_string(kMaxGridX) + ", " +
            std::to_string(kMaxGridYZ) + ", " + std::to_string(kMaxGridYZ) + ")");
  if (threads < 1 || threads > kMaxBlockThreads)
    invalid("workgroup " + dims(b) + " of " + std::to_string(threads) + " work-items, at most " +
            std::to_string(kMaxBlockThreads));
  if (l.lds_bytes > kLdsBytes)
    invalid(std::to_string(l.lds_bytes) + " bytes of LDS asked for, a gfx942 workgroup has " +
            std::to_string(kLdsBytes));
  if (g[2] != 1 || b[1] != 1 || b[2] != 1) refuse(l, "only 1-D workgroups and 1-D or 2-D grids are emulated");
}

}  // namespace

void run_grid(const Launch& launch) {
  check_limits(launch);
  Launch l = launch;
  l.trace_slot = trace_launch(l);
  // Workgroups are independent (their only shared state is global memory, and the kernels'
  // cross-workgroup writes are atomics), so host threads take them in any order: as many threads
  // as torch's intra-op setting (the calling one among them), each taking the next workgroup id
  // until the grid is done or a workgroup failed. (at::parallel_for would run serially here: the
  // extension is not compiled with OpenMP.)
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto worker = [&] {
    std::unique_ptr<Workgroup> runner = Workgroup::acquire();
    for (int64_t id; !failed.load() && (id = next++) < l.grid();) {
      try {
        runner->run(l, id);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!failed.exchange(true)) error = std::current_exception();
      }
    }
    Workgroup::release(std::move(runner));
  };
  const int64_t threads = std::max<int64_t>(1, std::min<int64_t>(torch::stable::get_num_threads(), l.grid()));
  std::vector<std::thread> helpers;
  for (int64_t i = 1; i < threads; ++i) helpers.emplace_back(worker);
  worker();
  for (std::thread& t : helpers) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace chiplet_fa::emu
