// The CPU kernels' threads: items of a grid handed out one at a time to as many threads as torch's
// intra-op setting (torch.get_num_threads(), the calling thread among them), started per call.
//
// Why not at::parallel_for: its body is inline and takes its OpenMP branch only in units compiled
// with -fopenmp, which this extension's are not, so it ran serially. Compiling them so (gcc, with
// torch's own libgomp) worked, but each call then paid the pool's wake-up: 8 ms for a grid of a
// few tiles on a 2-core machine with a busy core, against 0.14 ms for threads started here
// (docs/cpu_path.md); and clang, the emulated build's compiler, would bring its own OpenMP runtime.
// Why one item at a time: a causal grid's tiles differ in cost by up to the sequence length over
// the block, and a shared counter balances that where fixed chunks would leave threads idle.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include <torch/csrc/stable/ops.h>

namespace chiplet_fa {

// Calls item(i) once for every i in [0, n), from several threads; returns when all are done, and
// rethrows the first exception an item threw (the others then stop taking items).
template <typename F>
void parallel_items(int64_t n, const F& item) {
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto worker = [&] {
    try {
      for (int64_t i; !failed.load(std::memory_order_relaxed) && (i = next++) < n;) item(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!failed.exchange(true)) error = std::current_exception();
    }
  };
  const int64_t threads = std::min<int64_t>(torch::stable::get_num_threads(), n);
  std::vector<std::thread> helpers;
  for (int64_t t = 1; t < threads; ++t) helpers.emplace_back(worker);
  worker();
  for (std::thread& t : helpers) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace chiplet_fa
