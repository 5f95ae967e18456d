#include "emulate/access_trace.h"

#include <algorithm>
#include <atomic>
#include <stdexcept>

#include "emulate/kernel_launch.h"

namespace chiplet_fa::emu {
namespace {

struct Session {
  std::mutex mutex;
  std::vector<TracedLaunch> launches;
};

std::atomic<Session*> g_session{nullptr};

}  // namespace

bool TraceBuffer::record(int64_t wid, int region, const int64_t index[4]) {
  if (region >= 16 || index[0] >= (1 << 16) || index[2] >= (1 << 16) || index[1] >= (1 << 28)) return false;
  const uint64_t key = uint64_t(region) << 60 | uint64_t(index[0]) << 44 | uint64_t(index[2]) << 28 |
                       uint64_t(index[1]);
  if (seen.insert(key).second)
    reads.push_back({wid, int32_t(region), int32_t(index[0]), int32_t(index[2]), index[1]});
  return true;
}

void begin_trace() {
  Session* expected = nullptr;
  auto* session = new Session;
  if (!g_session.compare_exchange_strong(expected, session)) {
    delete session;
    throw std::runtime_error("chiplet_fa emulator: a trace session is already open");
  }
}

std::vector<TracedLaunch> end_trace() {
  Session* session = g_session.exchange(nullptr);
  if (!session) throw std::runtime_error("chiplet_fa emulator: no trace session is open");
  std::vector<TracedLaunch> out = std::move(session->launches);
  delete session;
  // Workgroups finished in whatever order the host threads ran them; each one's reads stay in
  // its own order.
  for (TracedLaunch& l : out)
    std::stable_sort(l.reads.begin(), l.reads.end(),
                     [](const TraceRead& a, const TraceRead& b) { return a.wid < b.wid; });
  return out;
}

bool tracing() { return g_session.load(std::memory_order_acquire) != nullptr; }

int trace_launch(const Launch& launch) {
  Session* session = g_session.load(std::memory_order_acquire);
  if (!session) return -1;
  TracedLaunch t{launch.where, launch.what, {}, {}};
  for (const Region& r : launch.regions) t.regions.emplace_back(r.name);
  std::lock_guard<std::mutex> lock(session->mutex);
  session->launches.push_back(std::move(t));
  return int(session->launches.size()) - 1;
}

void trace_workgroup(int slot, TraceBuffer& buffer) {
  Session* session = g_session.load(std::memory_order_acquire);
  if (!session || slot < 0) return;
  std::lock_guard<std::mutex> lock(session->mutex);
  auto& reads = session->launches[size_t(slot)].reads;
  reads.insert(reads.end(), buffer.reads.begin(), buffer.reads.end());
}

}  // namespace chiplet_fa::emu
