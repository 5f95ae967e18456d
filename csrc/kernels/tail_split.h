// The forward's last partial round split over keys, stream-K style. Persistent workers over equal
// tiles (no window, one length) finish whole rounds together; with `tiles % workers` tiles left,
// the rest of the workers idle through the last tile's whole time (H=32 N=8K D=128: 68 of 132
// busy, 3% of the kernel). Instead the claims from `first` on are units (one a worker at most),
// each an equal share of the left tiles' key blocks taken in map_workgroup's order: a unit is the
// end of one tile and the start of the next (one or two pieces). A piece leaves its O and row
// statistics unnormalised in a slot of `partials`; the last piece of a tile to finish, per warp
// (its rows), merges the tile's slots in their order, so the result does not depend on which one
// that was, and writes O and the LSE as a whole tile would.
#pragma once
#include <cstdint>

#include "platform.h"

namespace chiplet_fa {

struct FwdTailSplit {
  int64_t first = 0;        // claims before this take whole tiles (wid = claim)
  int32_t units = 0;        // 0: no split; else at most one a worker, claims [first, first + units)
  int32_t tail = 0;         // tiles split: wids [first, first + tail)
  int32_t tile_blocks = 0;  // key blocks of each tile
  float* partials = nullptr;  // 2 * units slots (a unit's first and second piece)
  int32_t* done = nullptr;    // key blocks merged so far, per (tail tile, consumer warp); zeroed
};

// A unit's part of one tile: key blocks [first, end) of tail tile `tile`, kept in slot `slot`.
struct TailPiece {
  int32_t tile, first, end, slot;
  CFA_HOST_DEVICE bool empty() const { return end == first; }
};

// In 32 bits (plan_tail_split keeps units * tail blocks below 2^31): the scheduler's lane has few
// registers, and 64-bit divisions are long calls.
CFA_HOST_DEVICE uint32_t tail_blocks(const FwdTailSplit& s) { return uint32_t(s.tail) * uint32_t(s.tile_blocks); }
// Unit u's blocks are [unit_begin(u), unit_begin(u + 1)) of the tail's blocks, tile after tile.
CFA_HOST_DEVICE uint32_t unit_begin(const FwdTailSplit& s, int32_t u) {
  return uint32_t(u) * tail_blocks(s) / uint32_t(s.units);
}
// The unit holding tail block b (units are never empty: tail_blocks >= units).
CFA_HOST_DEVICE int32_t unit_of_block(const FwdTailSplit& s, uint32_t b) {
  return int32_t(((b + 1) * uint32_t(s.units) - 1) / tail_blocks(s));
}

// Piece k (0 or 1) of unit u; empty() when the unit has no such piece.
CFA_HOST_DEVICE TailPiece unit_piece(const FwdTailSplit& s, int32_t u, int k) {
  const uint32_t b0 = unit_begin(s, u), b1 = unit_begin(s, u + 1), nb = uint32_t(s.tile_blocks);
  const int32_t tile = int32_t(b0 / nb) + k;
  const uint32_t t0 = uint32_t(tile) * nb, lo = b0 > t0 ? b0 : t0, hi = b1 < t0 + nb ? b1 : t0 + nb;
  return TailPiece{tile, int32_t(lo - t0), int32_t(hi > lo ? hi - t0 : lo - t0), 2 * u + k};
}

// The slots of tail tile i's pieces, in key order: [first_slot, then 2u for u in (first_unit, last_unit]].
struct TileSlots {
  int32_t first_slot, first_unit, last_unit;
  CFA_HOST_DEVICE int32_t count() const { return last_unit - first_unit + 1; }
  CFA_HOST_DEVICE int32_t slot(int32_t k) const { return k == 0 ? first_slot : 2 * (first_unit + k); }
};
CFA_HOST_DEVICE TileSlots tile_slots(const FwdTailSplit& s, int32_t i) {
  const uint32_t b0 = uint32_t(i) * uint32_t(s.tile_blocks);
  const int32_t u0 = unit_of_block(s, b0), u1 = unit_of_block(s, b0 + s.tile_blocks - 1);
  return TileSlots{2 * u0 + (unit_begin(s, u0) < b0 ? 1 : 0), u0, u1};
}

// Whether and how to split `tiles` equal tiles of `tile_blocks` key blocks over `workers`: only
// past a whole round and with at least an eighth of the workers idle in the last one; a unit a
// worker, or fewer where a unit would have under two blocks (a piece's fixed cost is about two
// blocks' time), but more units than tiles left (each has part of one tile at most, two pieces).
CFA_HOST_DEVICE FwdTailSplit plan_tail_split(int64_t tiles, int64_t workers, int32_t tile_blocks) {
  FwdTailSplit s;
  const int64_t tail = workers > 0 ? tiles % workers : 0, blocks = tail * tile_blocks;
  const int64_t units = blocks / 2 < workers ? blocks / 2 : workers;
  if (tiles <= workers || tail == 0 || (workers - tail) * 8 < workers || units <= tail ||
      (blocks + 1) * units > INT32_MAX)
    return s;
  s.first = tiles - tail;
  s.units = int32_t(units);
  s.tail = int32_t(tail);
  s.tile_blocks = tile_blocks;
  return s;
}

}  // namespace chiplet_fa
