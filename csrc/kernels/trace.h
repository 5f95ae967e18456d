// Timelines of the sm90 kernels' workgroups, for a diagnostic build (CHIPLET_FA_TRACE=1; CMake
// defines CFA_TRACE): Nsight Compute reports a launch's totals, not when each SM ran which tile,
// and the open questions are of that kind (a causal grid's tail, a tile's fixed cost, the gap
// between one-tile workgroups on an SM). A default build compiles none of it.
//
// The sink is a zeroed buffer of kTraceWords-word events: workgroup w's role r (a consumer
// warpgroup, or kTraceWorkgroup) writes its event n at ((w * kTraceRoles + r) * slots + n), so no
// atomic orders the writers; events past `slots` are dropped (bench/trace.py checks its counts).
//   word 0, 1  %globaltimer (ns; one clock for every SM)
//   word 2     kind | role << 8 | %smid << 16
//   word 3     the workgroup (blockIdx.x)
//   word 4..7  the kind's fields (TraceKind)
#pragma once
#include <cstdint>

#ifndef CFA_TRACE
#define CFA_TRACE 0
#endif

namespace chiplet_fa {

inline constexpr bool kTrace = CFA_TRACE != 0;
inline constexpr int kTraceWords = 8;
inline constexpr int kTraceRoles = 8, kTraceWorkgroup = 7;  // the last: events about the whole workgroup

enum class TraceKind : uint32_t {
  // forward, per tile and consumer (its n-th tile: events 2n, 2n + 1): begin [batch, q_head << 16
  // | m_block, key blocks, cycles waiting for the tile's Q], end [the tile's cycles, cycles waiting
  // for its first K block, key blocks, cycles waiting for the others].
  kFwdTileBegin = 1,
  kFwdTileEnd = 2,
  // backward main pass, [steps, kv_head << 16 | n_block, batch, split]: the workgroup starts
  // (kTraceWorkgroup, event 0), its producer issued its last copy (kTraceWorkgroup, event 1), a
  // consumer issued its dK, dV stores (the consumer, event 0).
  kBwdBegin = 3,
  kBwdConsumerEnd = 4,
  kBwdProducerEnd = 5,
};

struct TraceSink {
  uint32_t* words = nullptr;  // null: record nothing
  int32_t workgroups = 0, slots = 0;  // events of later workgroups, or past a role's slots, are dropped
};

// The sink the next launches record into: set by chiplet_fa._C._trace_set in a traced build.
inline TraceSink& trace_sink() {
  static TraceSink sink;
  return sink;
}

}  // namespace chiplet_fa
