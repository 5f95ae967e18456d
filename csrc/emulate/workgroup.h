// One workgroup at a time per host thread: its work-items run as fibers (fiber.h) under a
// round-robin scheduler, each until it blocks at a workgroup barrier or a wave operation, or
// returns. A barrier releases its threads when all of the workgroup's threads have reached it; a
// wave operation (cross-lane op, MFMA) when all lanes of the wave have, and the last lane to
// arrive computes every lane's result. When no thread can run and some have not returned, the
// workgroup is deadlocked: run() throws, saying where each thread waits. A kernel that breaks a
// rule the emulator checks calls fail(), which abandons the workgroup the same way.
#pragma once
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "emulate/access_trace.h"
#include "emulate/fiber.h"
#include "emulate/kernel_launch.h"

namespace chiplet_fa::emu {

constexpr int kWaveSize = 64;

// Where a wave operation was called from (the intrinsic's call site in the kernel source).
struct Site {
  const char* file;
  int line;
  bool operator==(const Site& o) const {
    return line == o.line && (file == o.file || std::strcmp(file, o.file) == 0);
  }
};

enum class WaveOp : uint8_t { kShflXor, kAny, kMfmaF16, kMfmaBf16 };
const char* wave_op_name(WaveOp op);

// The order a scheduling pass visits a workgroup's threads in (process-wide). A correct kernel's
// results do not depend on it (beyond the order of float atomics): one that does reads LDS
// another thread writes without a barrier between them, which comparing runs exposes.
enum class Schedule : uint8_t { kAscending, kDescending, kShuffled };
void set_schedule(Schedule schedule);

// Computes the results of all `lanes` lanes of a wave from their operands (arrays of the
// operation's In and Out types).
using Combine = void (*)(const void* ins, void* outs, int lanes);

class Workgroup {
 public:
  // A runner (fibers and LDS) from a process-wide pool, and back: a runner is tied to no host
  // thread between workgroups, so launches on short-lived threads reuse fiber stacks.
  static std::unique_ptr<Workgroup> acquire();
  static void release(std::unique_ptr<Workgroup> runner);
  // On a fiber: the workgroup it belongs to.
  static Workgroup& current();
  // On a fiber, whether one runs (false in host code).
  static bool on_fiber();

  ~Workgroup();
  // Runs workgroup `id` of the launch to completion; throws std::runtime_error if it fails.
  void run(const Launch& launch, int64_t id);

  // --- called on a fiber, by the kernel's work-items ---
  int thread_id() const { return running_; }
  int64_t block_id() const { return id_; }
  int block_dim() const { return launch_->block(); }
  unsigned char* lds() { return lds_; }
  const Launch& launch() const { return *launch_; }
  TraceBuffer& trace() { return trace_; }
  // __syncthreads.
  void barrier();
  // A wave operation: this lane's operand in, its result out (see the top of this file).
  template <typename In, typename Out>
  Out wave_op(WaveOp op, Site site, const In& in, Combine combine);
  // Abandons the workgroup with an error naming the kernel, the workgroup and this thread.
  [[noreturn]] void fail(const std::string& what);

 private:
  enum class State : uint8_t { kReady, kRunning, kBarrier, kWaveOp, kDone };
  struct Thread {
    Fiber fiber;
    State state = State::kReady;
    int64_t barriers = 0;  // barriers passed
    WaveOp op{};           // what it waits at (kWaveOp)
    Site site{"", 0};
  };
  // Operands and results of one wave operation; two per wave, used alternately by each lane,
  // so a lane that already left operation n for n+1 cannot overwrite what a slower lane of the
  // wave has still to read from n (it cannot get to n+2 before every lane has left n).
  struct Exchange {
    static constexpr size_t kInBytes = 32, kOutBytes = 16;
    int arrived = 0;
    WaveOp op{};
    Site site{"", 0};
    alignas(16) unsigned char in[kWaveSize * kInBytes];
    alignas(16) unsigned char out[kWaveSize * kOutBytes];
  };
  struct Wave {
    int lanes = 0;
    Exchange exchange[2];
    uint8_t next[kWaveSize] = {};  // per lane: the exchange its next operation uses
  };

  Workgroup();
  static void thread_main(void*);
  void schedule();
  void visit_order(std::vector<int>& order, int64_t pass) const;
  void check_lds_tail() const;
  void suspend_running(State state);
  std::string where(int thread) const;
  std::string deadlock_report() const;
  std::string describe(int thread) const;
  [[noreturn]] void mismatch(const Exchange& x, WaveOp op, Site site);

  const Launch* launch_ = nullptr;
  int64_t id_ = 0;
  int running_ = -1;
  int barrier_arrived_ = 0;
  std::vector<std::unique_ptr<Thread>> threads_;
  std::vector<std::unique_ptr<Wave>> waves_;
  unsigned char* lds_ = nullptr;
  std::string error_;
  TraceBuffer trace_;
};

template <typename In, typename Out>
Out Workgroup::wave_op(WaveOp op, Site site, const In& in, Combine combine) {
  static_assert(sizeof(In) <= Exchange::kInBytes && sizeof(Out) <= Exchange::kOutBytes);
  const int lane = running_ % kWaveSize;
  Wave& w = *waves_[size_t(running_ / kWaveSize)];
  Exchange& x = w.exchange[w.next[lane]];
  w.next[lane] ^= 1;
  if (x.arrived == 0) {
    x.op = op;
    x.site = site;
  } else if (x.op != op || !(x.site == site)) {
    mismatch(x, op, site);
  }
  std::memcpy(x.in + lane * sizeof(In), &in, sizeof(In));
  if (++x.arrived == w.lanes) {
    combine(x.in, x.out, w.lanes);
    x.arrived = 0;
    const int first = running_ - lane;
    for (int l = 0; l < w.lanes; ++l)
      if (l != lane) threads_[size_t(first + l)]->state = State::kReady;
  } else {
    Thread& t = *threads_[size_t(running_)];
    t.op = op;
    t.site = site;
    suspend_running(State::kWaveOp);
  }
  Out result;
  std::memcpy(&result, x.out + lane * sizeof(Out), sizeof(Out));
  return result;
}

}  // namespace chiplet_fa::emu
