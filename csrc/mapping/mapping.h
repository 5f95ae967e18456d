// Workgroup mapping: the one function that turns a linear workgroup id into the tile
// (batch, q_head, m_block) it computes. GPU kernels, the CPU path, the tests (through
// pybind11) and the L2 model all call map_workgroup, so they cannot disagree.
//
// Orders. "Head-first" enumerates tiles as ((batch * H_q + q_head) * M + m_block): consecutive
// positions walk the m-blocks of one head, and because q_head = kv_head * G + j (G = H_q/H_kv),
// every tile of one attention compute cluster (ACC = one KV head with its G query heads) is a
// contiguous run of G*M positions. "Block-first" enumerates m_block-major: consecutive
// positions walk all (batch, q_head) rows of one m-block.
//
// Swizzle. Hardware with X L2 domains dispatches workgroup wid to domain wid % X (AMD XCDs,
// round-robin). Domain x therefore receives c_x = floor(grid/X) + (x < grid%X) workgroups,
// the k-th of which is wid = k*X + x. The swizzled policies give domain x the contiguous range
// [start_x, start_x + c_x) of the head-first order, start_x = x*floor(grid/X) + min(x, grid%X).
// Range sizes are exactly the dispatch counts, so the mapping is a bijection for every grid,
// divisible by X or not (the remainder is spread one tile each over the first grid%X domains;
// nothing is duplicated or dropped). Within its range a domain walks head-first
// (swizzled_head_first) or m_block-major (swizzled_block_first).
// Guarantees: when X divides the number of ACCs, every ACC lies in one domain and each domain
// walks its ACCs one after another. Otherwise each domain still holds one contiguous run of
// the head-first order, so ACCs are visited in increasing order and at most X-1 ACCs are split
// across domains (the ones straddling a range boundary), each across consecutive domains.
// The naive policies are the swizzled ones with X = 1.
#pragma once
#include <cstdint>

#include "platform.h"

namespace chiplet_fa {

enum class Mapping : int32_t {
  kBlockFirst = 0,
  kHeadFirst = 1,
  kSwizzledBlockFirst = 2,
  kSwizzledHeadFirst = 3,
};
constexpr int kNumMappings = 4;

struct GridShape {
  int32_t batch;
  int32_t num_q_heads;
  int32_t num_m_blocks;
  int32_t num_xcds;  // L2 domains the hardware dispatches over round-robin
};

struct Tile {
  int32_t batch;
  int32_t q_head;
  int32_t m_block;
};

CFA_HOST_DEVICE int64_t grid_size(const GridShape& g) {
  return int64_t(g.batch) * g.num_q_heads * g.num_m_blocks;
}

CFA_HOST_DEVICE Tile tile_of_row(int64_t row, int32_t m_block, const GridShape& g) {
  return Tile{int32_t(row / g.num_q_heads), int32_t(row % g.num_q_heads), m_block};
}

// k-th tile, m_block-major, of the head-first range [begin, end) (end > begin).
// Column m of the range holds rows rs..re, minus row rs when m < ms and row re when m > me,
// so the number of tiles before column m is C(m) = m*n - min(m, ms) - max(0, m - me - 1).
CFA_HOST_DEVICE Tile block_major_in_range(int64_t begin, int64_t end, int64_t k,
                                          const GridShape& g) {
  const int64_t M = g.num_m_blocks;
  const int64_t rs = begin / M, ms = begin % M;
  const int64_t re = (end - 1) / M, me = (end - 1) % M;
  const int64_t n = re - rs + 1;
  auto before = [&](int64_t m) {
    const int64_t a = m < ms ? m : ms;
    const int64_t b = m - me - 1 > 0 ? m - me - 1 : 0;
    return m * n - a - b;
  };
  int64_t lo = 0, hi = M - 1;  // smallest m with before(m + 1) > k
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (before(mid + 1) > k) hi = mid; else lo = mid + 1;
  }
  const int64_t row = rs + (lo < ms ? 1 : 0) + (k - before(lo));
  return tile_of_row(row, int32_t(lo), g);
}

CFA_HOST_DEVICE bool is_swizzled(Mapping p) {
  return p == Mapping::kSwizzledBlockFirst || p == Mapping::kSwizzledHeadFirst;
}

// The domain a workgroup runs on under round-robin dispatch and the head-first range that
// domain owns under `policy` (the whole grid for naive policies).
CFA_HOST_DEVICE void domain_range(Mapping policy, int64_t wid, const GridShape& g,
                                  int64_t* begin, int64_t* end, int64_t* k) {
  const int64_t grid = grid_size(g);
  const int64_t X = is_swizzled(policy) && g.num_xcds > 1 ? g.num_xcds : 1;
  const int64_t x = wid % X, q = grid / X, r = grid % X;
  *begin = x * q + (x < r ? x : r);
  *end = *begin + q + (x < r ? 1 : 0);
  *k = wid / X;
}

CFA_HOST_DEVICE Tile map_workgroup(Mapping policy, int64_t wid, const GridShape& g) {
  int64_t begin, end, k;
  domain_range(policy, wid, g, &begin, &end, &k);
  if (policy == Mapping::kHeadFirst || policy == Mapping::kSwizzledHeadFirst) {
    const int64_t p = begin + k;
    return tile_of_row(p / g.num_m_blocks, int32_t(p % g.num_m_blocks), g);
  }
  return block_major_in_range(begin, end, k, g);
}

}  // namespace chiplet_fa
