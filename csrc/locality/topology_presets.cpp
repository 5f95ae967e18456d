#include "topology_presets.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace chiplet_fa::locality {

namespace {

constexpr int64_t kMiB = 1 << 20;

// wgs_per_cu: the paper's Triton kernel on CDNA3 (BLOCK_M=128, 4 waves, waves_per_eu=2)
// keeps two workgroups per CU; the project's H100/H200 kernel (D=128, 8 warps) keeps one.
Topology amd(const char* name, int xcds, int cus_per_xcd, const char* note) {
  return Topology{name, xcds, 4 * kMiB, 128, 16, cus_per_xcd, 2, Dispatch::kRoundRobin,
                  kDefaultStaggerSteps, note};
}

Topology hopper(const char* name, const char* note) {
  return Topology{name, 1, 50 * kMiB, 128, 16, 132, 1, Dispatch::kSingle, kDefaultStaggerSteps, note};
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

}  // namespace

std::vector<Topology> topology_presets() {
  return {
      amd("mi300x", 8, 38, "gfx942, 8 XCDs x 38 CUs, 4 MB L2 per XCD"),
      amd("mi300a", 6, 38, "gfx942 APU, 6 XCDs x 38 CUs"),
      amd("mi308x", 4, 20, "gfx942, 4 XCDs x 20 CUs"),
      amd("mi355x", 8, 32, "gfx950, 8 XCDs x 32 CUs, 4 MB L2 per XCD"),
      hopper("h100", "SXM, 132 SMs, 50 MB L2 modelled as one domain"),
      hopper("h200", "SXM, 132 SMs, 50 MB L2 modelled as one domain; physically two partitions "
                     "joined by a fabric (lts__t_sectors_srcunit_ltcfabric counts the crossings)"),
  };
}

Topology topology_preset(const std::string& name) {
  const std::string key = lower(name);
  std::string known;
  for (const Topology& t : topology_presets()) {
    if (t.name == key) return t;
    known += (known.empty() ? "" : ", ") + t.name;
  }
  throw std::invalid_argument("unknown GPU preset '" + name + "'; known presets: " + known);
}

Topology topology_for_domains(int num_domains) {
  if (num_domains < 1)
    throw std::invalid_argument("num_domains must be >= 1, got " + std::to_string(num_domains));
  if (num_domains == 1) return topology_preset("h200");
  if (num_domains == 8) return topology_preset("mi300x");
  if (num_domains == 6) return topology_preset("mi300a");
  if (num_domains == 4) return topology_preset("mi308x");
  // Any other XCD count: CDNA3 XCDs, as many as detected.
  Topology t = topology_preset("mi300x");
  t.name = "cdna3-" + std::to_string(num_domains) + "xcd";
  t.num_domains = num_domains;
  t.note = "CDNA3 XCDs (4 MB L2, 38 CUs each), count as detected";
  return t;
}

void validate(const Topology& t) {
  auto need = [&](bool ok, const char* what) {
    if (!ok) throw std::invalid_argument("topology '" + t.name + "': " + what);
  };
  need(t.num_domains >= 1, "num_domains must be >= 1");
  need(t.l2_bytes >= 0, "l2_bytes must be >= 0");
  need(t.line_bytes >= 1, "line_bytes must be >= 1");
  need(t.ways >= 1, "ways must be >= 1");
  need(t.cus_per_domain >= 1, "cus_per_domain must be >= 1");
  need(t.wgs_per_cu >= 1, "wgs_per_cu must be >= 1");
  need(t.stagger_steps >= 0 && t.stagger_steps < 1e6, "stagger_steps must be in [0, 1e6)");
  need(t.dispatch == Dispatch::kRoundRobin || t.dispatch == Dispatch::kSingle,
       "dispatch must be round_robin or single");
}

}  // namespace chiplet_fa::locality
