// The K/V access streams of emulated launches, for the L2 model (issue #11). The emulated
// dispatcher deals workgroups out as MI300X does, workgroup wid to XCD wid % num_xcds; while a
// trace session is open, the copy hook (global_memory.h) records for every workgroup each row of
// an input region (q, k, v, dout) the first time the workgroup reads it, in the order it does.
// Which XCD a workgroup ran on, and so each XCD's ordered stream of tiles, follows from wid.
// The emulator has no timing: how the workgroups of one XCD interleave is not recorded (the L2
// simulator models that).
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

namespace chiplet_fa::emu {

struct Launch;

struct TraceRead {
  int64_t wid;
  int32_t region;  // index into TracedLaunch::regions
  int32_t batch, head;
  int64_t row;
};

struct TracedLaunch {
  std::string where, what;
  std::vector<std::string> regions;
  std::vector<TraceRead> reads;  // by workgroup id, then in the order the workgroup read them
};

// One workgroup's first reads; the runner appends it to the session when the workgroup ends.
struct TraceBuffer {
  std::vector<TraceRead> reads;
  std::unordered_set<uint64_t> seen;
  void clear() {
    reads.clear();
    seen.clear();
  }
  // Records (region, batch, head, row) unless this workgroup read it before; false when the
  // index does not fit the record (batch and head below 2^16, row below 2^28).
  bool record(int64_t wid, int region, const int64_t index[4]);
};

// Starts recording every launch until end_trace(); one session at a time (process-wide).
void begin_trace();
// Stops recording and returns what the launches since begin_trace() read.
std::vector<TracedLaunch> end_trace();
// Whether a session is open.
bool tracing();
// Called by run_grid: the slot of a launch in the open session (-1 when none is open).
int trace_launch(const Launch& launch);
// Called by a runner when a workgroup of a traced launch ends.
void trace_workgroup(int slot, TraceBuffer& buffer);

}  // namespace chiplet_fa::emu
