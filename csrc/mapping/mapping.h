// Workgroup mapping: the one function that turns a linear workgroup id into the tile
// (batch, q_head, m_block) it computes. GPU kernels, the CPU path, the tests (through
// the Python module) and the L2 model all call map_workgroup, so they cannot disagree.
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
//
// Ragged grids. A variable-length batch gives each sequence b its own number of m-blocks M_b
// (GridShape::block_offsets). Head-first order is then sequence by sequence, each sequence's rows
// (q heads) one after another; block-first order within a range visits column m of every row in
// the range that has one. Everything above holds unchanged, with grid = H * sum_b M_b, except
// that ACCs of different sequences differ in size, so the swizzled guarantee is the general one:
// each domain holds one contiguous run, at most X-1 ACCs are split, each across consecutive
// domains. With equal lengths the ragged order is the uniform one, tile for tile.
//
// Longest first. Under a causal mask the tiles of one row differ in length (m-block m reads about
// m + 1 key blocks), and a grid that ends on long tiles leaves most workers idle while the last
// few finish. With GridShape::longest_first_rows = S >= 1 the head-first orders cut the rows into
// sections of S (rows sS .. sS + S - 1) and walk the part of a section inside a domain's range
// column by column from its last m-block, so every section hands out its longest tiles first and
// the grid ends on the last section's shortest ones, spread over S rows. S = 1 reverses each row.
// The backward's key-block grid has its longest tiles first (key block n is seen by the queries
// from n on): with GridShape::first_blocks_longest its sections are walked from the first column.
// The walk only permutes positions within one domain's range, so every guarantee above holds:
// a domain computes the same tiles as without it, in another order. The sections take each other's
// place in range order, so the L2 holds about one section's K/V at a time: the launch code sizes S
// with longest_first_section_rows (below) to fit. The block-first orders keep their columns
// ascending: the L2 model's closed form, validated on them, does not follow them reversed (B=1,
// H=32, N=8K causal on MI300X: 64% predicted against 45% simulated), and they are the baselines
// the mapping is measured against.
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
  int32_t num_q_heads;   // rows per sequence (the backward's KV grid: KV heads)
  int32_t num_m_blocks;  // blocks per row; in a ragged grid the most any sequence has
  int32_t num_xcds;      // L2 domains the hardware dispatches over round-robin
  // Ragged grids (variable-length batches): block_offsets[b] = blocks of the sequences before b
  // (batch + 1 entries), so every row of sequence b has block_offsets[b + 1] - block_offsets[b]
  // blocks. nullptr: every row has num_m_blocks.
  const int32_t* block_offsets = nullptr;
  int32_t longest_first_rows = 0;  // > 0: head-first orders walk sections of this many rows longest tile first
  bool first_blocks_longest = false;  // a row's longest tiles are its first blocks (a causal backward's keys)
};

struct Tile {
  int32_t batch;
  int32_t q_head;
  int32_t m_block;
};

CFA_HOST_DEVICE int64_t grid_size(const GridShape& g) {
  if (g.block_offsets) return int64_t(g.num_q_heads) * g.block_offsets[g.batch];
  return int64_t(g.batch) * g.num_q_heads * g.num_m_blocks;
}

// Blocks of each row of sequence b, and the head-first position of that sequence's first tile.
CFA_HOST_DEVICE int64_t blocks_of(const GridShape& g, int32_t b) {
  return g.block_offsets ? g.block_offsets[b + 1] - g.block_offsets[b] : g.num_m_blocks;
}
CFA_HOST_DEVICE int64_t sequence_start(const GridShape& g, int32_t b) {
  return int64_t(g.num_q_heads) * (g.block_offsets ? g.block_offsets[b] : int64_t(b) * g.num_m_blocks);
}

// The sequence holding head-first position p (0 <= p < grid_size): the last b with
// sequence_start(b) <= p. Sequences without blocks are never returned.
CFA_HOST_DEVICE int32_t sequence_at(const GridShape& g, int64_t p) {
  if (!g.block_offsets) return int32_t(p / (int64_t(g.num_q_heads) * g.num_m_blocks));
  int32_t lo = 0, hi = g.batch - 1;
  while (lo < hi) {
    const int32_t mid = (lo + hi + 1) / 2;
    if (sequence_start(g, mid) <= p) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// Rows are (batch, q_head) pairs in order, row = batch * H + q_head.
CFA_HOST_DEVICE int64_t row_length(const GridShape& g, int64_t row) { return blocks_of(g, int32_t(row / g.num_q_heads)); }
CFA_HOST_DEVICE int64_t row_start(const GridShape& g, int64_t row) {
  const int32_t b = int32_t(row / g.num_q_heads);
  return sequence_start(g, b) + (row % g.num_q_heads) * blocks_of(g, b);
}
CFA_HOST_DEVICE Tile tile_of_row(int64_t row, int64_t m_block, const GridShape& g) {
  return Tile{int32_t(row / g.num_q_heads), int32_t(row % g.num_q_heads), int32_t(m_block)};
}
CFA_HOST_DEVICE int64_t row_at(const GridShape& g, int64_t p) {
  const int32_t b = sequence_at(g, p);
  return int64_t(b) * g.num_q_heads + (p - sequence_start(g, b)) / blocks_of(g, b);
}

// The tile at head-first position p.
CFA_HOST_DEVICE Tile head_first_tile(int64_t p, const GridShape& g) {
  if (!g.block_offsets) return tile_of_row(p / g.num_m_blocks, p % g.num_m_blocks, g);
  const int64_t row = row_at(g, p);
  return tile_of_row(row, p - row_start(g, row), g);
}

// k-th tile, m_block-major, of the head-first range [begin, end) (end > begin) of a uniform grid.
// Column m of the range holds rows rs..re, minus row rs when m < ms and row re when m > me,
// so the number of tiles before column m is C(m) = m*n - min(m, ms) - max(0, m - me - 1).
CFA_HOST_DEVICE Tile block_major_in_uniform_range(int64_t begin, int64_t end, int64_t k, const GridShape& g) {
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
  return tile_of_row(row, lo, g);
}

// The rows of a head-first range [begin, end) of a ragged grid: row rs from block ms on, whole
// rows rs+1 .. re-1, row re up to block me. Rows of one sequence have one length, so sums over the
// whole rows take one step per sequence.
struct RaggedRange {
  const GridShape& g;
  int64_t rs, ms, re, me;

  CFA_HOST_DEVICE RaggedRange(const GridShape& grid, int64_t begin, int64_t end) : g(grid) {
    rs = row_at(g, begin);
    ms = begin - row_start(g, rs);
    re = row_at(g, end - 1);
    me = end - 1 - row_start(g, re);
  }
  // Calls f(first_row, rows, length) for the runs of whole rows rs+1 .. re-1 of one sequence each;
  // stops early when f returns true.
  template <typename F>
  CFA_HOST_DEVICE void whole_rows(F f) const {
    for (int64_t row = rs + 1; row < re;) {
      const int64_t next = (row / g.num_q_heads + 1) * g.num_q_heads;
      const int64_t last = next < re ? next : re;
      if (f(row, last - row, row_length(g, row))) return;
      row = last;
    }
  }
  // Blocks of row rs and re inside the range: [first_lo, first_hi] and [0, me].
  CFA_HOST_DEVICE int64_t first_hi() const { return rs == re ? me : row_length(g, rs) - 1; }
  // Tiles of the range in columns < m.
  CFA_HOST_DEVICE int64_t before(int64_t m) const {
    auto clip = [](int64_t x) { return x > 0 ? x : int64_t(0); };
    int64_t n = clip((m < first_hi() + 1 ? m : first_hi() + 1) - ms);
    if (re != rs) n += m < me + 1 ? m : me + 1;
    whole_rows([&](int64_t, int64_t rows, int64_t len) {
      n += rows * (m < len ? m : len);
      return false;
    });
    return n;
  }
  // The kk-th row (in row order) with a tile in column m.
  CFA_HOST_DEVICE int64_t row_in_column(int64_t m, int64_t kk) const {
    if (m >= ms && m <= first_hi()) {
      if (kk == 0) return rs;
      --kk;
    }
    int64_t found = -1;
    whole_rows([&](int64_t row, int64_t rows, int64_t len) {
      if (len <= m) return false;
      if (kk < rows) {
        found = row + kk;
        return true;
      }
      kk -= rows;
      return false;
    });
    return found >= 0 ? found : re;
  }
};

// k-th tile, m_block-major, of the head-first range [begin, end) (end > begin): the closed form on
// a uniform grid, the same order found by search on a ragged one.
CFA_HOST_DEVICE Tile block_major_in_range(int64_t begin, int64_t end, int64_t k, const GridShape& g) {
  if (!g.block_offsets) return block_major_in_uniform_range(begin, end, k, g);
  const RaggedRange r(g, begin, end);
  int64_t lo = 0, hi = g.num_m_blocks - 1;  // smallest m with before(m + 1) > k
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (r.before(mid + 1) > k) hi = mid; else lo = mid + 1;
  }
  return tile_of_row(r.row_in_column(lo, k - r.before(lo)), lo, g);
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

// k-th tile of the head-first range [begin, end) under longest_first_rows: the part of the range in
// the section holding position begin + k, walked m_block-major from its longest column (the last,
// or with first_blocks_longest the first: block_major_in_range on that part, reversed or not).
CFA_HOST_DEVICE Tile longest_first_tile(int64_t begin, int64_t end, int64_t k, const GridShape& g) {
  const int64_t p = begin + k, rows = int64_t(g.batch) * g.num_q_heads;
  const int64_t first = row_at(g, p) / g.longest_first_rows * g.longest_first_rows;
  const int64_t last = first + g.longest_first_rows;
  const int64_t section_begin = row_start(g, first), section_end = last < rows ? row_start(g, last) : grid_size(g);
  const int64_t lo = begin > section_begin ? begin : section_begin, hi = end < section_end ? end : section_end;
  return block_major_in_range(lo, hi, g.first_blocks_longest ? p - lo : hi - 1 - p, g);
}

// The blocks of `block` rows a grid row has on average over `batch` sequences of `total_rows` rows in
// all, at least 1: what longest_first_section_rows takes as m_blocks for a packed batch.
CFA_HOST_DEVICE int64_t mean_row_blocks(int64_t total_rows, int64_t batch, int64_t block) {
  const int64_t blocks = batch > 0 ? (total_rows / batch + block - 1) / block : 0;
  return blocks > 1 ? blocks : 1;
}

// Rows per longest-first section for `workers` tiles running at once in one L2 domain: the fewest,
// a power of two, whose tiles number at least twice the workers, so the last section's short tiles
// are spread over every worker (bench/causal_tail_sim.py: makespan 1.00-1.03x of the ideal where
// reversed rows give 1.03-1.30x at small causal shapes); then halved while the data the section's
// rows stream (bytes_per_head for each `group` rows) exceed half the domain's L2, unless no more
// rows than the workers span in head-first order anyway (whose data run through the L2 together
// without sections too).
CFA_HOST_DEVICE int32_t longest_first_section_rows(int64_t rows, int64_t m_blocks, int64_t workers,
                                                   int64_t bytes_per_head, int64_t group, int64_t l2_bytes) {
  if (m_blocks < 1 || workers < 1 || group < 1) return 1;
  int64_t s = 1;
  while (s < rows && s * m_blocks < 2 * workers) s *= 2;
  const int64_t span = (workers + m_blocks - 1) / m_blocks;
  if (bytes_per_head > 0)
    while (s > 1 && s > span && s > l2_bytes / 2 / bytes_per_head * group) s /= 2;
  return int32_t(s < rows ? s : rows > 1 ? rows : 1);
}

// The tile workgroup `wid` computes, 0 <= wid < grid_size(g).
CFA_HOST_DEVICE Tile map_workgroup(Mapping policy, int64_t wid, const GridShape& g) {
  int64_t begin, end, k;
  domain_range(policy, wid, g, &begin, &end, &k);
  if (policy != Mapping::kHeadFirst && policy != Mapping::kSwizzledHeadFirst)
    return block_major_in_range(begin, end, k, g);
  return g.longest_first_rows > 0 ? longest_first_tile(begin, end, k, g) : head_first_tile(begin + k, g);
}

}  // namespace chiplet_fa
