#include "emulate/launch.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

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
  if (launch.grid < 0) refuse(launch, "only 1-D workgroups and 1-D or 2-D grids are emulated");
  if (launch.block < 1 || launch.block > kMaxBlockThreads)
    refuse(launch, "a workgroup has 1 to " + std::to_string(kMaxBlockThreads) + " work-items, asked for " +
                       std::to_string(launch.block));
  if (launch.lds_bytes > kLdsBytes)
    refuse(launch, std::to_string(launch.lds_bytes) + " bytes of LDS asked for, a gfx942 workgroup has " +
                       std::to_string(kLdsBytes));
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
    for (int64_t id; !failed.load() && (id = next++) < l.grid;) {
      try {
        runner->run(l, id);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!failed.exchange(true)) error = std::current_exception();
      }
    }
    Workgroup::release(std::move(runner));
  };
  const int64_t threads = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), l.grid));
  std::vector<std::thread> helpers;
  for (int64_t i = 1; i < threads; ++i) helpers.emplace_back(worker);
  worker();
  for (std::thread& t : helpers) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace chiplet_fa::emu
