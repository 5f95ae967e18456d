#include "emulate/workgroup.h"

#include "platform.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <random>
#include <new>
#include <sstream>
#include <stdexcept>

namespace chiplet_fa::emu {
namespace {

thread_local Workgroup* tl_current = nullptr;  // the workgroup whose fibers run on this thread

// LDS as the workgroup sees it before writing: every byte 0xff, which reads back as NaN in
// fp16, bf16 and fp32, so a read of LDS nobody wrote shows up in the results.
constexpr unsigned char kLdsPoison = 0xff;

std::atomic<Schedule> g_schedule{Schedule::kAscending};

}  // namespace

void set_schedule(Schedule schedule) { g_schedule.store(schedule); }

const char* wave_op_name(WaveOp op) {
  switch (op) {
    case WaveOp::kShflXor: return "__shfl_xor";
    case WaveOp::kAny: return "__any";
    case WaveOp::kMfmaF16: return "__builtin_amdgcn_mfma_f32_16x16x16f16";
    case WaveOp::kMfmaBf16: return "__builtin_amdgcn_mfma_f32_16x16x16bf16_1k";
  }
  return "?";
}

namespace {
std::mutex g_pool_mutex;
std::vector<std::unique_ptr<Workgroup>>& pool() {
  static auto* runners = new std::vector<std::unique_ptr<Workgroup>>;  // never destroyed: outlives exit
  return *runners;
}
}  // namespace

std::unique_ptr<Workgroup> Workgroup::acquire() {
  {
    std::lock_guard<std::mutex> lock(g_pool_mutex);
    if (!pool().empty()) {
      std::unique_ptr<Workgroup> runner = std::move(pool().back());
      pool().pop_back();
      return runner;
    }
  }
  return std::unique_ptr<Workgroup>(new Workgroup);
}

void Workgroup::release(std::unique_ptr<Workgroup> runner) {
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  pool().push_back(std::move(runner));
}

Workgroup& Workgroup::current() {
  if (!tl_current || tl_current->running_ < 0)
    throw std::logic_error("chiplet_fa emulator: a device function was called outside an emulated kernel");
  return *tl_current;
}

bool Workgroup::on_fiber() { return tl_current && tl_current->running_ >= 0; }

Workgroup::Workgroup() {
  lds_ = static_cast<unsigned char*>(::operator new(kLdsBytes, std::align_val_t(1024)));
}

Workgroup::~Workgroup() { ::operator delete(lds_, std::align_val_t(1024)); }

void Workgroup::thread_main(void*) { tl_current->launch_->body(tl_current->launch_->call); }

void Workgroup::run(const Launch& launch, int64_t id) {
  launch_ = &launch;
  id_ = id;
  barrier_arrived_ = 0;
  error_.clear();
  trace_.clear();
  std::memset(lds_, kLdsPoison, kLdsBytes);
  while (int(threads_.size()) < launch.block()) threads_.push_back(std::make_unique<Thread>());
  for (int t = 0; t < launch.block(); ++t) {
    Thread& th = *threads_[size_t(t)];
    th.fiber.start(&Workgroup::thread_main, nullptr);
    th.state = State::kReady;
    th.barriers = 0;
  }
  const int n_waves = (launch.block() + kWaveSize - 1) / kWaveSize;
  while (int(waves_.size()) < n_waves) waves_.push_back(std::make_unique<Wave>());
  for (int w = 0; w < n_waves; ++w) {
    Wave& wave = *waves_[size_t(w)];
    wave.lanes = std::min(kWaveSize, launch.block() - w * kWaveSize);
    wave.exchange[0].arrived = wave.exchange[1].arrived = 0;
    std::memset(wave.next, 0, sizeof(wave.next));
  }
  Workgroup* outer = tl_current;
  tl_current = this;
  try {
    schedule();
  } catch (...) {
    tl_current = outer;
    running_ = -1;
    throw;
  }
  tl_current = outer;
  check_lds_tail();
  trace_workgroup(launch.trace_slot, trace_);
}

// A workgroup owns the LDS its launch asked for: the bytes past it must still be poison.
void Workgroup::check_lds_tail() const {
  const unsigned char *begin = lds_ + launch_->lds_bytes, *end = lds_ + kLdsBytes;
  const unsigned char* hit = std::find_if(begin, end, [](unsigned char b) { return b != kLdsPoison; });
  if (hit == end) return;
  throw std::runtime_error(where(-1) + ": wrote LDS byte " + std::to_string(hit - lds_) + ", past the " +
                           std::to_string(launch_->lds_bytes) + " bytes the launch allocated");
}

void Workgroup::visit_order(std::vector<int>& order, int64_t pass) const {
  const int n = int(order.size());
  for (int i = 0; i < n; ++i) order[size_t(i)] = i;
  const Schedule s = g_schedule.load(std::memory_order_relaxed);
  if (s == Schedule::kDescending) std::reverse(order.begin(), order.end());
  if (s == Schedule::kShuffled) std::shuffle(order.begin(), order.end(), std::mt19937_64(uint64_t(id_) * 7919 + pass));
}

// Round-robin passes over the threads, each run until it blocks or returns. A pass that runs
// nobody while some thread has not returned is a deadlock.
void Workgroup::schedule() {
  const int n = launch_->block();
  int done = 0;
  std::vector<int> order(static_cast<size_t>(n));
  for (int64_t pass = 0; done < n; ++pass) {
    visit_order(order, pass);
    bool ran = false;
    for (const int t : order) {
      Thread& th = *threads_[size_t(t)];
      if (th.state != State::kReady) continue;
      ran = true;
      running_ = t;
      th.state = State::kRunning;
      th.fiber.resume();
      running_ = -1;
      if (!error_.empty()) throw std::runtime_error(error_);
      if (th.fiber.finished()) {
        th.state = State::kDone;
        ++done;
      }
    }
    if (!ran) throw std::runtime_error(deadlock_report());
  }
}

void Workgroup::suspend_running(State state) {
  Thread& t = *threads_[size_t(running_)];
  t.state = state;
  t.fiber.suspend();
}

void Workgroup::barrier() {
  Thread& self = *threads_[size_t(running_)];
  if (++barrier_arrived_ == launch_->block()) {
    barrier_arrived_ = 0;
    for (int t = 0; t < launch_->block(); ++t)
      if (threads_[size_t(t)]->state == State::kBarrier) threads_[size_t(t)]->state = State::kReady;
  } else {
    suspend_running(State::kBarrier);
  }
  ++self.barriers;
}

std::string Workgroup::where(int thread) const {
  std::ostringstream s;
  s << "chiplet_fa emulator: " << launch_->what << " launched by " << launch_->where << ", workgroup " << id_;
  if (thread >= 0) s << ", thread " << thread << " (wave " << thread / kWaveSize << ", lane " << thread % kWaveSize << ")";
  return s.str();
}

void Workgroup::fail(const std::string& what) {
  if (!on_fiber()) throw std::runtime_error("chiplet_fa emulator: " + what);
  error_ = where(running_) + ": " + what;
  threads_[size_t(running_)]->fiber.suspend();
  std::abort();  // an abandoned workgroup is never resumed
}

void Workgroup::mismatch(const Exchange& x, WaveOp op, Site site) {
  std::ostringstream s;
  s << "lanes of one wave reached different wave operations: this lane " << wave_op_name(op) << " at "
    << site.file << ":" << site.line << ", " << x.arrived << " lane(s) before it " << wave_op_name(x.op) << " at "
    << x.site.file << ":" << x.site.line << " (divergent control flow around a wave operation)";
  fail(s.str());
}

std::string Workgroup::describe(int thread) const {
  const Thread& t = *threads_[size_t(thread)];
  std::ostringstream s;
  switch (t.state) {
    case State::kDone: s << "returned after " << t.barriers << " barrier(s)"; break;
    case State::kBarrier: s << "waits at __syncthreads number " << t.barriers + 1; break;
    case State::kWaveOp:
      s << "waits at " << wave_op_name(t.op) << " (" << t.site.file << ":" << t.site.line << ") after "
        << t.barriers << " barrier(s)";
      break;
    default: s << "runnable"; break;
  }
  return s.str();
}

// Threads in runs of consecutive ids that are in the same state, e.g.
//   threads 0-63: waits at __syncthreads number 2; threads 64-255: returned after 1 barrier(s)
std::string Workgroup::deadlock_report() const {
  std::ostringstream s;
  s << where(-1) << ": deadlock: no thread can run, and not all have returned (a barrier or wave operation "
    << "that some threads never reach: an early return or divergent control flow). ";
  const int n = launch_->block();
  for (int begin = 0; begin < n;) {
    const std::string what = describe(begin);
    int end = begin + 1;
    while (end < n && describe(end) == what) ++end;
    s << (begin ? "; " : "");
    if (end - begin == 1) s << "thread " << begin << ": " << what;
    else s << "threads " << begin << "-" << end - 1 << ": " << what;
    begin = end;
  }
  return s.str();
}

}  // namespace chiplet_fa::emu

// --- the device API of device.h and emulate/emulated_platform.h, for the running work-item ---
namespace chiplet_fa::emu {

// Unused dimensions have index 0 (dim3's defaults are extents, 1).
dim3 thread_idx() { return dim3(unsigned(Workgroup::current().thread_id()), 0, 0); }
dim3 block_idx() {
  const Workgroup& w = Workgroup::current();
  const int64_t x = w.launch().grid_x();
  return dim3(unsigned(w.block_id() % x), unsigned(w.block_id() / x), 0);
}
dim3 block_dim() { return dim3(unsigned(Workgroup::current().block_dim())); }
void block_barrier() { Workgroup::current().barrier(); }
unsigned char* lds() { return Workgroup::current().lds(); }

}  // namespace chiplet_fa::emu
