// Closed-form L2 estimate. A workgroup reuses the K/V of the previous workgroup of its ACC on
// the same domain (its predecessor) iff the K/V tiles touched by the whole domain between the
// two starts fit in L2. With the dispatch model of dispatch.h, position p starts at
//   start(p) = floor(p / S) * T + floor((p % S) * stagger)
// (stagger capped as in dispatch.h) and a resident workgroup q touches the steps [start(pp) - start(q), start(p) - start(q)]
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
  double total_steps = 0;
  for (int64_t p = 0; p < L; ++p) {
    const Tile tile = queue_tile(policy, g, d, n, p);
    acc[size_t(p)] = shape.acc_of(tile);
    steps[size_t(p)] = shape.steps(tile);
    total_steps += double(steps[size_t(p)]);
    const int64_t q_bytes = shape.q_tile_bytes(tile, topo.line_bytes);
    t.q_read_bytes += q_bytes;
    t.o_write_bytes += q_bytes;
  }
  // Causal tiles differ in length; waves are spaced by the mean workgroup length.
  const double T = total_steps / double(L);
  const double stagger = effective_stagger(topo, shape);
  auto start = [&](int64_t p) { return double(p / S) * T + double(slot_phase(p % S, stagger)); };

  const int64_t num_accs = shape.batch * shape.num_kv_heads;
  std::vector<int64_t> last(static_cast<size_t>(num_accs), -1);
  // Per-ACC union state for the current p, reset lazily by epoch.
  std::vector<int64_t> epoch(static_cast<size_t>(num_accs), -1);
  std::vector<double> covered_to(static_cast<size_t>(num_accs));
  double hit_pairs = 0;
  int64_t read_pairs = 0;
  for (int64_t p = 0; p < L; ++p) {
    const int64_t a = acc[size_t(p)], pp = last[size_t(a)];
    last[size_t(a)] = p;
    read_pairs += steps[size_t(p)];
    if (pp < 0 || geometry.sets == 0) continue;
    const double t_prev = start(pp), t_now = start(p);
    double ws = 0;
    bool fits = true;
    // Walk back from p: starts decrease, so each ACC's intervals move right monotonically and
    // the union grows by the part of the new interval beyond what is covered.
    for (int64_t q = p; q >= std::max<int64_t>(0, pp - S) && fits; --q) {
      const int64_t b = acc[size_t(q)];
      const double lo = std::max(0.0, t_prev - start(q));
      const double hi = std::min(double(steps[size_t(q)]), t_now - start(q));
      if (epoch[size_t(b)] != p) {
        epoch[size_t(b)] = p;
        covered_to[size_t(b)] = 0;
      }
      if (hi <= lo) continue;
      const double grow = hi - std::max(lo, covered_to[size_t(b)]);
      if (grow > 0) ws += grow;
      covered_to[size_t(b)] = std::max(covered_to[size_t(b)], hi);
      fits = ws <= ws_limit;
    }
    if (fits) hit_pairs += set_hit_probability(ws, geometry) * double(std::min(steps[size_t(p)], steps[size_t(pp)]));
  }
  t.kv_read_bytes = read_pairs * pair_bytes;
  t.kv_hit_bytes = std::llround(hit_pairs) * pair_bytes;
  return t;
}

}  // namespace

Traffic estimate(const Topology& topo, const AttnShape& shape, Mapping policy, int mapping_xcds) {
  validate(topo);
  validate(shape);
  std::vector<int32_t> offsets;
  const GridShape g = shape.grid_shape(mapping_xcds, offsets);
  const int64_t n = dispatch_domains(topo);
  Traffic sum;
  for (int64_t d = 0; d < n; ++d) sum += estimate_domain(topo, shape, policy, g, d, n);
  return sum;
}

}  // namespace chiplet_fa::locality
