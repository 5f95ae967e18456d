#include "auto_policy.h"

#include <map>
#include <mutex>
#include <tuple>
#include <vector>

namespace chiplet_fa::locality {
namespace {

// A packed batch's key holds its lengths: two batches of one mean length differ.
using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int32_t, bool, int32_t,
                       int32_t, std::vector<int64_t>, std::vector<int64_t>, std::string, int32_t, int64_t,
                       int32_t, int32_t, double>;

Key key_of(const AttnShape& s, const Topology& t) {
  // With per-sequence lengths, seqlen_q/seqlen_k are bounds that do not change the prediction.
  const int64_t seqlen_q = s.varlen() ? 0 : s.seqlen_q, seqlen_k = s.varlen() ? 0 : s.seqlen_k;
  return {s.batch, s.num_q_heads, s.num_kv_heads, seqlen_q, seqlen_k, s.head_dim, s.elem_bytes, s.causal,
          s.block_m, s.block_n, s.seqlens_q, s.seqlens_k, t.name, t.num_domains, t.l2_bytes,
          t.cus_per_domain, t.wgs_per_cu, t.stagger_steps};
}

AutoChoice compute(const AttnShape& shape, const Topology& topo) {
  AutoChoice c{Mapping::kHeadFirst, topo, {}, {}};
  const bool multi = topo.num_domains > 1;
  for (int i = 0; i < kNumMappings; ++i) {
    const Mapping m = static_cast<Mapping>(i);
    c.candidate[size_t(i)] = multi || !is_swizzled(m);
    if (c.candidate[size_t(i)]) c.predicted[size_t(i)] = estimate(topo, shape, m, topo.num_domains);
  }
  int64_t best = -1;
  for (int i = 0; i < kNumMappings; ++i) {
    const int64_t bytes = c.predicted[size_t(i)].dram_read_bytes();
    if (c.candidate[size_t(i)] && (best < 0 || bytes < best)) best = bytes;
  }
  constexpr Mapping kPreference[] = {Mapping::kSwizzledHeadFirst, Mapping::kHeadFirst,
                                     Mapping::kSwizzledBlockFirst, Mapping::kBlockFirst};
  for (Mapping m : kPreference) {
    const size_t i = size_t(m);
    if (c.candidate[i] && double(c.predicted[i].dram_read_bytes()) <= double(best) * 1.01) {
      c.mapping = m;
      break;
    }
  }
  return c;
}

}  // namespace

AutoChoice choose_mapping(const AttnShape& shape, const Topology& topo) {
  static std::mutex mutex;
  static std::map<Key, AutoChoice> cache;
  const Key key = key_of(shape, topo);
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  AutoChoice c = compute(shape, topo);  // outside the lock: estimates of new shapes run in parallel
  std::lock_guard<std::mutex> lock(mutex);
  if (cache.size() >= 4096) cache.clear();  // bound memory for workloads of ever-new shapes
  return cache.emplace(key, std::move(c)).first->second;
}

AutoChoice choose_mapping(const AttnShape& shape, int num_domains) {
  return choose_mapping(shape, topology_for_domains(num_domains));
}

}  // namespace chiplet_fa::locality
