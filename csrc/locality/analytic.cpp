// Closed-form L2 estimate. A workgroup reuses the K/V of the previous workgroup of its ACC on
// the same domain (its predecessor) iff the K/V tiles touched by the whole domain between the
// two starts fit in L2. With the dispatch model of dispatch.h, position p starts when the domain's
// first free slot takes it (Schedule below; T_q = K/V steps of q):
//   start(p) = floor(p / S) * T + floor((p % S) * stagger)   when every workgroup has T steps,
// later or earlier by how much longer or shorter the workgroups before it on its slot ran (causal
// tiles, the sequences of a packed batch). A workgroup q running in the window touches the steps
// [start(pp) - start(q), start(p) - start(q)]
// of its ACC's K/V (clipped to [0, T_q]) between the starts of predecessor pp and p. The
// working set is the union of those intervals per ACC, summed over the ACCs in flight:
//   WS(p) = sum over ACCs b in flight of | U_{q in b} [start(pp)-start(q), start(p)-start(q)] ∩ [0,T_q] |
// counted in K/V tile pairs. p hits on a fraction h(WS) of the min(T_p, T_pp) pairs it shares
// with pp: the chance that the pair's set (sets picked by hash, as in the simulator) received
// fewer than `ways` of the other WS - 1 pairs, X ~ Poisson((WS - 1) / sets):
//   h(WS) = P(X <= ways - 1) = sum_{k < ways} e^-lambda lambda^k / k!
// (a step at WS = capacity for a fully associative L2).
#include <algorithm>
#include <cmath>
#include <functional>
#include <queue>
#include <utility>
#include <vector>

#include "dispatch.h"
#include "model.h"

namespace chiplet_fa::locality {
namespace {

double set_hit_probability(double ws, const PairGeometry& g) {
  if (g.sets == 0) return 0.0;
  const double lambda = std::max(0.0, ws - 1.0) / double(g.sets);
  if (g.sets == 1) return lambda <= g.ways - 1 ? 1.0 : 0.0;
  double term = std::exp(-lambda), sum = term;
  for (int k = 1; k < g.ways; ++k) sum += (term *= lambda / k);
  return std::min(1.0, sum);
}

// When each queue position of one domain starts, as the simulator runs them: slot s is first
// free at slot_phase(s); the free slot (earliest, then lowest index) takes the next position and is
// free again `steps` later. Starts do not decrease along the queue. With equal lengths T this is
// start(p) = floor(p / S) * T + slot_phase(p % S).
struct Schedule {
  std::vector<int64_t> start, end;
  std::vector<int64_t> oldest;        // the earliest position still on its slot when p starts
  std::vector<int64_t> prev_longer;   // the nearest earlier position that ends later (-1: none)

  // The workgroups before p still running when p starts, latest start first. Walks back from p,
  // jumping over runs of workgroups that end no later than one already found finished.
  void running_at(int64_t p, std::vector<int64_t>& out) const {
    out.clear();
    const int64_t t = start[size_t(p)];
    for (int64_t q = p - 1; q >= oldest[size_t(p)];) {
      if (end[size_t(q)] > t) {
        out.push_back(q--);
      } else {
        q = prev_longer[size_t(q)];
      }
    }
  }
};

Schedule schedule(const std::vector<int64_t>& steps, int64_t S, double stagger) {
  const size_t L = steps.size();
  Schedule sched{std::vector<int64_t>(L), std::vector<int64_t>(L), std::vector<int64_t>(L), std::vector<int64_t>(L)};
  using Free = std::pair<int64_t, int64_t>;  // (time, slot)
  std::priority_queue<Free, std::vector<Free>, std::greater<Free>> free;
  for (int64_t s = 0; s < S; ++s) free.emplace(slot_phase(s, stagger), s);
  std::vector<int64_t> on_slot(size_t(S), -1), longer;  // longer: positions of decreasing end
  std::vector<bool> replaced(L);
  int64_t oldest = 0;
  for (size_t p = 0; p < L; ++p) {
    const auto [time, s] = free.top();
    free.pop();
    if (on_slot[size_t(s)] >= 0) replaced[size_t(on_slot[size_t(s)])] = true;
    on_slot[size_t(s)] = int64_t(p);
    while (replaced[size_t(oldest)]) ++oldest;
    sched.start[p] = time;
    sched.end[p] = time + steps[p];
    sched.oldest[p] = oldest;
    while (!longer.empty() && sched.end[size_t(longer.back())] <= sched.end[p]) longer.pop_back();
    sched.prev_longer[p] = longer.empty() ? -1 : longer.back();
    longer.push_back(int64_t(p));
    free.emplace(sched.end[p], s);
  }
  return sched;
}

Traffic estimate_domain(const Topology& topo, const AttnShape& shape, Mapping policy,
                        const GridShape& g, int64_t d, int64_t n) {
  const int64_t S = topo.slots_per_domain();
  const int64_t L = queue_length(grid_size(g), d, n);
  const int64_t pair_bytes = 2 * shape.kv_tile_bytes(topo.line_bytes);
  const PairGeometry geometry = pair_geometry(topo, shape);
  // Past this working set no set keeps a pair (P < 1e-3): stop counting.
  const double ws_limit = 2.0 * double(geometry.sets * geometry.ways) + 64.0;
  Traffic t;
  if (L == 0) return t;

  std::vector<int64_t> acc(static_cast<size_t>(L)), steps(static_cast<size_t>(L));
  for (int64_t p = 0; p < L; ++p) {
    const Tile tile = queue_tile(policy, g, d, n, p);
    acc[size_t(p)] = shape.acc_of(tile);
    steps[size_t(p)] = shape.steps(tile);
    const int64_t q_bytes = shape.q_tile_bytes(tile, topo.line_bytes);
    t.q_read_bytes += q_bytes;
    t.o_write_bytes += q_bytes;
  }
  const Schedule sched = schedule(steps, S, effective_stagger(topo, shape));
  const std::vector<int64_t>& start = sched.start;

  const int64_t num_accs = shape.batch * shape.num_kv_heads;
  std::vector<int64_t> last(static_cast<size_t>(num_accs), -1);
  // Per-ACC union state for the current p, reset lazily by epoch.
  std::vector<int64_t> epoch(static_cast<size_t>(num_accs), -1);
  std::vector<int64_t> covered_to(static_cast<size_t>(num_accs));
  std::vector<int64_t> resident;
  double hit_pairs = 0;
  int64_t read_pairs = 0;
  for (int64_t p = 0; p < L; ++p) {
    const int64_t a = acc[size_t(p)], pp = last[size_t(a)];
    last[size_t(a)] = p;
    read_pairs += steps[size_t(p)];
    if (pp < 0 || geometry.sets == 0) continue;
    const int64_t t_prev = start[size_t(pp)], t_now = start[size_t(p)];
    int64_t ws = 0;
    bool fits = true;
    // Adds q's steps in the window to its ACC's union. Called in order of decreasing start, so
    // each ACC's intervals move right monotonically and the union grows by the part of the new
    // interval beyond what is covered.
    auto touch = [&](int64_t q) {
      const int64_t b = acc[size_t(q)];
      const int64_t lo = std::max<int64_t>(0, t_prev - start[size_t(q)]);
      const int64_t hi = std::min(steps[size_t(q)], t_now - start[size_t(q)]);
      if (epoch[size_t(b)] != p) {
        epoch[size_t(b)] = p;
        covered_to[size_t(b)] = 0;
      }
      if (hi <= lo) return;
      const int64_t grow = hi - std::max(lo, covered_to[size_t(b)]);
      if (grow > 0) ws += grow;
      covered_to[size_t(b)] = std::max(covered_to[size_t(b)], hi);
      fits = double(ws) <= ws_limit;
    };
    // The workgroups that started in the window, then those already running when it opened.
    for (int64_t q = p; q >= pp && fits; --q) touch(q);
    if (fits) {
      sched.running_at(pp, resident);
      for (int64_t q : resident) {
        if (!fits) break;
        touch(q);
      }
    }
    if (fits) hit_pairs += set_hit_probability(double(ws), geometry) * double(std::min(steps[size_t(p)], steps[size_t(pp)]));
  }
  t.kv_read_bytes = read_pairs * pair_bytes;
  t.kv_hit_bytes = std::llround(hit_pairs) * pair_bytes;
  return t;
}

}  // namespace

Traffic estimate(const Topology& topo, const AttnShape& shape, Mapping policy, int mapping_xcds) {
  const DispatchedGrid dg(topo, shape, mapping_xcds);
  Traffic sum;
  for (int64_t d = 0; d < dg.domains; ++d) sum += estimate_domain(topo, shape, policy, dg.grid, d, dg.domains);
  return sum;
}

}  // namespace chiplet_fa::locality
