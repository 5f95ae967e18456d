// Trace-driven L2 simulator: every workgroup of every domain, in dispatch order, reads its K/V
// tiles one step at a time through that domain's set-associative LRU cache.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "dispatch.h"
#include "model.h"

namespace chiplet_fa::locality {
namespace {

// Set-associative cache with true LRU per set. The unit is one K/V tile pair (the K tile and
// the V tile of one step of one ACC): the kernel reads both in the same step, so their lines
// are equally recent and enter and leave together. Sets are picked by a hash of the pair, as
// the hardware hashes addresses over its channels.
class PairCache {
 public:
  explicit PairCache(const PairGeometry& g) : ways_(g.ways), sets_(g.sets) {
    tags_.assign(size_t(sets_ * ways_), -1);
    stamps_.assign(size_t(sets_ * ways_), 0);
  }

  bool access(int64_t key) {
    if (sets_ == 0) return false;
    // splitmix64 finaliser: a random-like set choice, which the closed form assumes.
    uint64_t h = uint64_t(key) + 0x9E3779B97F4A7C15ull;
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
    h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
    h ^= h >> 31;
    const int64_t base = int64_t(h % uint64_t(sets_)) * ways_;
    int64_t* tag = &tags_[size_t(base)];
    uint64_t* stamp = &stamps_[size_t(base)];
    ++clock_;
    int victim = 0;
    for (int w = 0; w < ways_; ++w) {
      if (tag[w] == key) {
        stamp[w] = clock_;
        return true;
      }
      if (stamp[w] < stamp[victim]) victim = w;
    }
    tag[victim] = key;
    stamp[victim] = clock_;
    return false;
  }

 private:
  int ways_;
  int64_t sets_;
  uint64_t clock_ = 0;
  std::vector<int64_t> tags_;
  std::vector<uint64_t> stamps_;
};

struct Slot {
  bool busy = false;
  int64_t ready_round = 0;  // first round the slot may start its next workgroup
  int64_t acc = 0, step = 0, steps = 0;
};

Traffic simulate_domain(const Topology& topo, const AttnShape& shape, Mapping policy,
                        const GridShape& g, int64_t d, int64_t n, std::atomic<int64_t>& done) {
  const int64_t S = topo.slots_per_domain();
  const int64_t L = queue_length(grid_size(g), d, n);
  const int64_t pair_bytes = 2 * shape.kv_tile_bytes(topo.line_bytes);
  const int64_t n_blocks = shape.num_n_blocks();
  PairCache cache(pair_geometry(topo, shape));
  std::vector<Slot> slots(static_cast<size_t>(S));
  const double stagger = effective_stagger(topo, shape);
  for (int64_t s = 0; s < S; ++s) slots[size_t(s)].ready_round = slot_phase(s, stagger);

  Traffic t;
  int64_t next = 0, active = 0, hits = 0, reads = 0, reported = 0;
  for (int64_t round = 0; next < L || active > 0; ++round) {
    for (Slot& sl : slots) {
      // A free slot takes the next workgroup of the queue; one with no K/V step (a causal
      // tile above the diagonal) only reads Q and writes O.
      while (!sl.busy && next < L && round >= sl.ready_round) {
        const Tile tile = queue_tile(policy, g, d, n, next++);
        const int64_t q_bytes = shape.q_tile_bytes(tile, topo.line_bytes);
        t.q_read_bytes += q_bytes;
        t.o_write_bytes += q_bytes;
        sl.acc = shape.acc_of(tile);
        sl.steps = shape.steps(tile);
        sl.step = 0;
        sl.busy = sl.steps > 0;
        active += sl.busy;
      }
      if (!sl.busy) continue;
      hits += cache.access(sl.acc * n_blocks + sl.step);
      ++reads;
      if (++sl.step == sl.steps) {
        sl.busy = false;
        sl.ready_round = round + 1;
        --active;
      }
    }
    if (reads - reported >= (1 << 20)) {
      done += reads - reported;
      reported = reads;
    }
  }
  done += reads - reported;
  t.kv_read_bytes = reads * pair_bytes;
  t.kv_hit_bytes = hits * pair_bytes;
  return t;
}

}  // namespace

Traffic simulate(const Topology& topo, const AttnShape& shape, Mapping policy, int mapping_xcds,
                 const std::function<void(int64_t, int64_t)>& progress) {
  validate(topo);
  validate(shape);
  std::vector<int32_t> offsets;
  const GridShape g = shape.grid_shape(mapping_xcds, offsets);
  const int64_t n = dispatch_domains(topo);
  const int64_t total = shape.num_q_heads * shape.total_steps();

  // Domains are independent (private L2s): simulate them on parallel threads.
  std::vector<Traffic> per_domain(static_cast<size_t>(n));
  std::atomic<int64_t> next_domain{0}, done{0};
  auto worker = [&] {
    for (int64_t d; (d = next_domain++) < n;)
      per_domain[size_t(d)] = simulate_domain(topo, shape, policy, g, d, n, done);
  };
  const int64_t threads = std::max<int64_t>(1, std::min<int64_t>(n, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int64_t i = 0; i < threads; ++i) pool.emplace_back(worker);
  try {
    if (progress) {
      while (done.load() < total) {
        progress(done.load(), total);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      progress(total, total);
    }
  } catch (...) {  // e.g. KeyboardInterrupt raised in a Python callback
    for (std::thread& th : pool) th.join();
    throw;
  }
  for (std::thread& th : pool) th.join();
  Traffic sum;
  for (const Traffic& t : per_domain) sum += t;
  return sum;
}

}  // namespace chiplet_fa::locality
