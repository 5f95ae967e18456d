// How many L2 domains (XCDs) the device dispatches workgroups over, round-robin.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace chiplet_fa {

constexpr const char* kNumXcdsEnv = "CHIPLET_FA_NUM_XCDS";
// The most L2 domains a mapping may assume (num_xcds, CHIPLET_FA_NUM_XCDS): far above any GPU's
// (MI300X: 8), and few enough that a persistent launch's per-domain counters and walks stay small.
constexpr int64_t kMaxXcds = 4096;
constexpr const char* kKfdTopologyRoot = "/sys/class/kfd/kfd/topology";

struct XcdDetection {
  int num_xcds;
  std::string source;  // which rule answered, for explain() and warnings
  bool assumed;        // true when no rule applied and 1 is an assumption
};

// The CPU (and the emulator on it): one domain, whatever CHIPLET_FA_NUM_XCDS says.
constexpr int kCpuXcds = 1;
inline XcdDetection cpu_xcds() { return {kCpuXcds, "CPU: one domain", false}; }

// GPU `device_index` (torch's ordinal). NVIDIA: 1 (one L2; its two partitions are not separately
// addressable), unless CHIPLET_FA_NUM_XCDS overrides. ROCm (a HIP build): detect_xcds_rocm with
// the real sysfs and environment; an assumed answer is reported once as a warning.
// detect_num_xcds raises ValueError for a bad CHIPLET_FA_NUM_XCDS, RuntimeError where sysfs
// gives a count it cannot use.
int detect_num_xcds(int device_index);
XcdDetection detect_xcds(int device_index);

// The ROCm rule with every input explicit, so tests can fake sysfs trees and devices:
//  1. env_override (CHIPLET_FA_NUM_XCDS) when given: a positive integer, else an error;
//  2. the KFD GPU node of the device under <kfd_root>/nodes/*/properties: num_xcc when present
//     (it follows the partition mode: CPX gives 1), else its CU count and gfx target;
//  3. CU count / CUs per XCD of the arch (gfx942: 38, gfx950: 32), with cu_count/arch from the
//     device properties when sysfs gave none; a count that is not a whole number of XCDs is
//     an error asking for CHIPLET_FA_NUM_XCDS; other archs have one L2 (1);
//  4. nothing readable: 1, assumed.
// visible_devices: HIP_VISIBLE_DEVICES (or CUDA_VISIBLE_DEVICES) to map the torch index to
// a physical GPU; when it cannot be parsed, nodes that all agree still give the answer.
XcdDetection detect_xcds_rocm(const std::string& kfd_root, int64_t device_index,
                              const std::optional<std::string>& env_override,
                              const std::optional<std::string>& visible_devices,
                              int64_t cu_count, const std::string& arch);

}  // namespace chiplet_fa
