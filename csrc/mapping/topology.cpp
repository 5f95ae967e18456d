#include "mapping/topology.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <string_view>

#include <torch/csrc/inductor/aoti_torch/c/shim.h>

#include "build_config.h"

namespace chiplet_fa {
namespace {

struct KfdNode {
  int64_t id;
  std::map<std::string, int64_t> props;
};

// GPU nodes (simd_count > 0; KFD lists CPUs as nodes too) in node order.
std::vector<KfdNode> read_kfd_gpus(const std::string& root) {
  namespace fs = std::filesystem;
  std::vector<KfdNode> gpus;
  std::error_code ec;
  const fs::path nodes = fs::path(root) / "nodes";
  if (!fs::is_directory(nodes, ec)) return gpus;
  for (const auto& entry : fs::directory_iterator(nodes, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    std::ifstream in(entry.path() / "properties");
    if (!in) continue;
    KfdNode node{std::stoll(name), {}};
    std::string key;
    int64_t value;
    for (std::string line; std::getline(in, line);) {
      std::istringstream fields(line);
      if (fields >> key >> value) node.props[key] = value;
    }
    if (node.props.count("simd_count") && node.props["simd_count"] > 0) gpus.push_back(node);
  }
  std::sort(gpus.begin(), gpus.end(), [](const KfdNode& a, const KfdNode& b) { return a.id < b.id; });
  return gpus;
}

std::optional<std::vector<int64_t>> parse_index_list(const std::string& s) {
  std::vector<int64_t> out;
  std::istringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    if (item.empty() || !std::all_of(item.begin(), item.end(), ::isdigit)) return std::nullopt;
    out.push_back(std::stoll(item));
  }
  return out;
}

// gfx_target_version 90402 -> "gfx942", 90010 -> "gfx90a".
std::string gfx_name(int64_t v) {
  static const char* hex = "0123456789abcdef";
  const int64_t major = v / 10000, minor = (v / 100) % 100, step = v % 100;
  return "gfx" + std::to_string(major) + hex[minor & 15] + hex[step & 15];
}

XcdDetection from_cus(int64_t cu_count, const std::string& arch, const std::string& where) {
  const std::string base = arch.substr(0, arch.find(':'));  // "gfx942:sramecc+:xnack-"
  const int64_t per_xcd = base == "gfx942" ? 38 : base == "gfx950" ? 32 : 0;
  if (per_xcd == 0)
    return {1, where + ": " + (base.empty() ? "unknown arch" : base) + " has a single L2", false};
  if (cu_count < per_xcd || cu_count % per_xcd != 0)
    throw std::runtime_error(where + ": " + std::to_string(cu_count) + " CUs is not a whole number of " +
                             base + " XCDs (" + std::to_string(per_xcd) +
                             " CUs each); set CHIPLET_FA_NUM_XCDS to the device's XCD count");
  return {int(cu_count / per_xcd), where + ": " + std::to_string(cu_count) + " CUs / " +
                                       std::to_string(per_xcd) + " CUs per XCD (" + base + ")",
          false};
}

}  // namespace

XcdDetection detect_xcds_rocm(const std::string& kfd_root, int64_t device_index,
                              const std::optional<std::string>& env_override,
                              const std::optional<std::string>& visible_devices,
                              int64_t cu_count, const std::string& arch) {
  if (env_override) {
    const std::string& s = *env_override;
    if (s.empty() || !std::all_of(s.begin(), s.end(), ::isdigit) || s.size() > 6 || std::stoll(s) < 1 ||
        std::stoll(s) > kMaxXcds)
      throw std::invalid_argument(std::string(kNumXcdsEnv) + " must be an integer in 1.." + std::to_string(kMaxXcds) +
                                  ", got '" + s + "'");
    return {int(std::stoll(s)), std::string("environment ") + kNumXcdsEnv, false};
  }
  const std::vector<KfdNode> gpus = read_kfd_gpus(kfd_root);
  const KfdNode* node = nullptr;
  int64_t physical = device_index;
  std::optional<std::vector<int64_t>> visible;
  if (visible_devices && !visible_devices->empty()) visible = parse_index_list(*visible_devices);
  if (visible && device_index < int64_t(visible->size())) physical = (*visible)[size_t(device_index)];
  const bool mapped = !visible_devices || visible_devices->empty() || visible;
  if (mapped && physical >= 0 && physical < int64_t(gpus.size())) node = &gpus[size_t(physical)];
  if (!node && !gpus.empty()) {
    // Unmappable index: fine when every GPU node reports the same XCC count.
    const int64_t first = gpus[0].props.count("num_xcc") ? gpus[0].props.at("num_xcc") : -1;
    const bool same = std::all_of(gpus.begin(), gpus.end(), [&](const KfdNode& g) {
      return g.props.count("num_xcc") && g.props.at("num_xcc") == first;
    });
    if (same && first >= 1)
      return {int(first), "KFD num_xcc (all " + std::to_string(gpus.size()) + " GPU nodes agree)", false};
  }
  if (node) {
    const std::string where = "KFD node " + std::to_string(node->id);
    auto it = node->props.find("num_xcc");
    if (it != node->props.end() && it->second >= 1)
      return {int(it->second), where + " num_xcc", false};
    auto simd = node->props.find("simd_count"), per_cu = node->props.find("simd_per_cu");
    auto target = node->props.find("gfx_target_version");
    if (simd != node->props.end() && per_cu != node->props.end() && per_cu->second > 0 &&
        target != node->props.end())
      return from_cus(simd->second / per_cu->second, gfx_name(target->second), where);
  }
  if (cu_count > 0 && !arch.empty()) return from_cus(cu_count, arch, "device properties");
  return {1, "no KFD topology under " + kfd_root + " and no device properties; assuming one L2 (set " +
                 kNumXcdsEnv + " to override)",
          true};
}

XcdDetection detect_xcds(int device_index) {
  if (const char* env = std::getenv(kNumXcdsEnv))
    return detect_xcds_rocm("", 0, std::string(env), std::nullopt, 0, "");
  // A HIP build runs on a ROCm torch, the others on NVIDIA GPUs.
  if (std::string_view(CHIPLET_FA_BACKEND) != "hip") return {1, "NVIDIA: one L2 domain", false};
  // sysfs does not change while the process runs: read it once per device.
  static std::mutex mutex;
  static std::map<int64_t, XcdDetection> cache;
  std::lock_guard<std::mutex> lock(mutex);
  const int64_t index = device_index;
  auto it = cache.find(index);
  if (it != cache.end()) return it->second;
  const char* visible = std::getenv("HIP_VISIBLE_DEVICES");
  if (!visible) visible = std::getenv("CUDA_VISIBLE_DEVICES");
  XcdDetection d = detect_xcds_rocm(kKfdTopologyRoot, index, std::nullopt,
                                    visible ? std::optional<std::string>(visible) : std::nullopt, 0, "");
  if (d.assumed) {
    const std::string warning =
        "chiplet_fa: cannot detect the XCD count of cuda:" + std::to_string(index) + ": " + d.source;
    aoti_torch_warn(__func__, __FILE__, __LINE__, warning.c_str());  // a Python UserWarning
  }
  return cache.emplace(index, d).first->second;
}

int detect_num_xcds(int device_index) {
  try {
    return detect_xcds(device_index).num_xcds;
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("chiplet_fa: ") + e.what());
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string("chiplet_fa: ") + e.what());
  }
}

}  // namespace chiplet_fa
