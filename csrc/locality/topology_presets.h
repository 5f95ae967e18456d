// Cache topology of a GPU as the L2 locality model sees it: how many L2 domains there are, how
// big each is, and how many workgroups run at once on each. Framework-free (simulator core,
// analytic estimate and the auto chooser use it; the Python module exposes it).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace chiplet_fa::locality {

enum class Dispatch : int32_t {
  kRoundRobin = 0,  // AMD XCDs: workgroup wid runs on domain wid % num_domains
  kSingle = 1,      // monolithic L2: every workgroup sees the one domain
};

struct Topology {
  std::string name;
  int32_t num_domains;      // L2 domains (XCDs); 1 for a monolithic L2
  int64_t l2_bytes;         // per domain
  int32_t line_bytes;       // allocation granularity of the L2
  int32_t ways;             // associativity
  int32_t cus_per_domain;   // compute units (SMs) feeding one domain
  int32_t wgs_per_cu;       // workgroups of the attention kernel resident per CU
  Dispatch dispatch;
  // Steady-state start offset between consecutive workgroups of one domain, in K/V-step
  // times: workgroups do not run in lock step, and this stagger is what decides whether the
  // workgroups of one ACC still find each other's tiles in L2 (see docs/l2_model.md).
  double stagger_steps;
  std::string note;

  int64_t slots_per_domain() const { return int64_t(cus_per_domain) * wgs_per_cu; }
};

// Default stagger: consecutive workgroups of a domain start one K/V step apart.
constexpr double kDefaultStaggerSteps = 1.0;

std::vector<Topology> topology_presets();
// Preset by name (case-insensitive: "mi300x", "mi300a", "mi308x", "mi355x", "h100", "h200").
Topology topology_preset(const std::string& name);
// Topology the auto chooser assumes for a device with `num_domains` detected L2 domains.
Topology topology_for_domains(int num_domains);
// Throws std::invalid_argument naming the field when a topology cannot be simulated.
void validate(const Topology& t);

}  // namespace chiplet_fa::locality
