// Trace-driven L2 simulator: every workgroup of every domain, in dispatch order, reads its K/V
// tiles one step at a time through that domain's set-associative LRU cache.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
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

// The workgroup at one position of a domain's queue, as the replay needs it: the Q bytes it reads
// and its K/V tile pairs, step s being keys[s], or first_key + s when keys is null (the model's
// own workgroups read their ACC's pairs in order).
struct Work {
  int64_t q_bytes = 0, steps = 0, first_key = 0;
  const int64_t* keys = nullptr;
  int64_t key(int64_t step) const { return keys ? keys[step] : first_key + step; }
};

struct Slot {
  bool busy = false;
  int64_t ready_round = 0;  // first round the slot may start its next workgroup
  int64_t step = 0;
  Work work;
};

// Replays a domain's queue of `length` workgroups, work_at(position) each, through its cache.
template <typename WorkAt>
Traffic replay_domain(const Topology& topo, const AttnShape& shape, int64_t length, const WorkAt& work_at,
                      std::atomic<int64_t>& done) {
  const int64_t S = topo.slots_per_domain();
  const int64_t pair_bytes = 2 * shape.kv_tile_bytes(topo.line_bytes);
  PairCache cache(pair_geometry(topo, shape));
  std::vector<Slot> slots(static_cast<size_t>(S));
  const double stagger = effective_stagger(topo, shape);
  for (int64_t s = 0; s < S; ++s) slots[size_t(s)].ready_round = slot_phase(s, stagger);

  Traffic t;
  int64_t next = 0, active = 0, hits = 0, reads = 0, reported = 0;
  for (int64_t round = 0; next < length || active > 0; ++round) {
    for (Slot& sl : slots) {
      // A free slot takes the next workgroup of the queue; one with no K/V step (a causal
      // tile above the diagonal) only reads Q and writes O.
      while (!sl.busy && next < length && round >= sl.ready_round) {
        sl.work = work_at(next++);
        t.q_read_bytes += sl.work.q_bytes;
        t.o_write_bytes += sl.work.q_bytes;
        sl.step = 0;
        sl.busy = sl.work.steps > 0;
        active += sl.busy;
      }
      if (!sl.busy) continue;
      hits += cache.access(sl.work.key(sl.step));
      ++reads;
      if (++sl.step == sl.work.steps) {
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

// The model's workgroup at queue position `pos` of domain d of n.
Work model_work(const AttnShape& shape, int32_t line_bytes, Mapping policy, const GridShape& g, int64_t d,
                int64_t n, int64_t pos) {
  const Tile tile = queue_tile(policy, g, d, n, pos);
  return Work{shape.q_tile_bytes(tile, line_bytes), shape.steps(tile), shape.acc_of(tile) * shape.num_n_blocks(),
              nullptr};
}

// Runs replay(d, done) for domains 0..n-1 on parallel threads (private L2s are independent) and
// sums their traffic; progress(done, total) is called from this thread meanwhile.
Traffic replay_domains(int64_t n, int64_t total,
                       const std::function<Traffic(int64_t, std::atomic<int64_t>&)>& replay,
                       const std::function<void(int64_t, int64_t)>& progress) {
  std::vector<Traffic> per_domain(static_cast<size_t>(n));
  std::atomic<int64_t> next_domain{0}, done{0};
  auto worker = [&] {
    for (int64_t d; (d = next_domain++) < n;) per_domain[size_t(d)] = replay(d, done);
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

}  // namespace

Traffic simulate(const Topology& topo, const AttnShape& shape, Mapping policy, int mapping_xcds,
                 const std::function<void(int64_t, int64_t)>& progress) {
  const DispatchedGrid dg(topo, shape, mapping_xcds);
  const int64_t total = shape.num_q_heads * shape.total_steps();
  return replay_domains(dg.domains, total, [&](int64_t d, std::atomic<int64_t>& done) {
    return replay_domain(topo, shape, dg.queue_length(d), [&](int64_t pos) {
      return model_work(shape, topo.line_bytes, policy, dg.grid, d, dg.domains, pos);
    }, done);
  }, progress);
}

DomainStreams model_streams(const Topology& topo, const AttnShape& shape, Mapping policy, int mapping_xcds) {
  const DispatchedGrid dg(topo, shape, mapping_xcds);
  DomainStreams streams(static_cast<size_t>(dg.domains));
  for (int64_t d = 0; d < dg.domains; ++d)
    for (int64_t pos = 0; pos < dg.queue_length(d); ++pos) {
      const Work w = model_work(shape, topo.line_bytes, policy, dg.grid, d, dg.domains, pos);
      WorkgroupStream& s = streams[size_t(d)].emplace_back();
      s.q_bytes = w.q_bytes;
      for (int64_t step = 0; step < w.steps; ++step) s.pairs.push_back(w.key(step));
    }
  return streams;
}

Traffic simulate_streams(const Topology& topo, const AttnShape& shape, const DomainStreams& streams) {
  validate(topo);
  validate(shape);
  if (int64_t(streams.size()) != dispatch_domains(topo))
    throw std::invalid_argument("simulate_streams: " + std::to_string(streams.size()) + " streams for a topology with " +
                                std::to_string(dispatch_domains(topo)) + " dispatch domain(s)");
  int64_t total = 0;
  for (const auto& domain : streams)
    for (const WorkgroupStream& w : domain) total += int64_t(w.pairs.size());
  return replay_domains(int64_t(streams.size()), total, [&](int64_t d, std::atomic<int64_t>& done) {
    const auto& queue = streams[size_t(d)];
    return replay_domain(topo, shape, int64_t(queue.size()), [&](int64_t pos) {
      const WorkgroupStream& w = queue[size_t(pos)];
      return Work{w.q_bytes, int64_t(w.pairs.size()), 0, w.pairs.data()};
    }, done);
  }, {});
}

}  // namespace chiplet_fa::locality
