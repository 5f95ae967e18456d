#include "ops/gpu/device_family.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "build_config.h"
#include "ops/stable_tensor.h"
#include "platform.h"

namespace chiplet_fa {
namespace {

#if defined(CFA_HIP)
// gcnArchName carries feature flags ("gfx942:sramecc+:xnack-"); the build lists bare targets.
std::string device_arch(int device) {
  hipDeviceProp_t prop;
  check_runtime(hipGetDeviceProperties(&prop, device) == hipSuccess, "chiplet_fa: cannot query cuda:", device);
  const std::string arch = prop.gcnArchName;
  return arch.substr(0, arch.find(':'));
}

std::string device_name(int device) { return device_arch(device); }

bool built_for(const std::string& arch) {
  const std::string list = std::string(";") + CHIPLET_FA_GPU_ARCHS + ";";
  return list.find(";" + arch + ";") != std::string::npos;
}

KernelFamily pick(int device) {
  const std::string arch = device_arch(device);
  check_runtime(built_for(arch), "chiplet_fa: this build has no kernels for ", arch, " (built for ",
                CHIPLET_FA_GPU_ARCHS, "); rebuild with PYTORCH_ROCM_ARCH=", arch,
                " or leave it unset on a machine with this GPU");
  return KernelFamily::kCdna3;
}
#else
constexpr int kMmaSyncSass[] = {0, CHIPLET_FA_MMA_SYNC_SASS};  // 0: keeps the array non-empty
constexpr int kMmaSyncPtx = CHIPLET_FA_MMA_SYNC_PTX;           // 0: none

// Two attribute queries, cheap enough for every call (the full properties are not).
int compute_capability(int device) {
  int major = 0, minor = 0;
  check_runtime(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
                    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess,
                "chiplet_fa: cannot query cuda:", device);
  return major * 10 + minor;
}

std::string device_name(int device) {
  cudaDeviceProp prop;
  check_runtime(cudaGetDeviceProperties(&prop, device) == cudaSuccess, "chiplet_fa: cannot query cuda:", device);
  return std::string(prop.name) + " (sm_" + std::to_string(compute_capability(device)) + ")";
}

// SASS runs on GPUs of its major version and a minor at least its own; PTX is compiled by the
// driver for any later GPU.
bool runs(KernelFamily f, int cc) {
  if (f == KernelFamily::kSm90) return CHIPLET_FA_HAS_SM90 && cc == 90;
  const bool sass = std::any_of(std::begin(kMmaSyncSass) + 1, std::end(kMmaSyncSass),
                                [cc](int a) { return a / 10 == cc / 10 && a <= cc; });
  return sass || (kMmaSyncPtx > 0 && kMmaSyncPtx <= cc);
}

// device_name queries the full properties: only for a message.
KernelFamily pick(int device) {
  const int cc = compute_capability(device);
  const char* env = std::getenv(kKernelEnv);
  const std::string forced = env ? env : "";
  check_value(forced.empty() || forced == "auto" || forced == "mma_sync" || forced == "sm90" || forced == "wgmma",
              "chiplet_fa: ", kKernelEnv, " must be auto, mma_sync or sm90 (alias wgmma), got '", forced, "'");
  if (forced == "mma_sync" || forced == "sm90" || forced == "wgmma") {
    const KernelFamily f = forced == "mma_sync" ? KernelFamily::kMmaSync : KernelFamily::kSm90;
    if (!runs(f, cc))
      throw std::runtime_error(message("chiplet_fa: ", kKernelEnv, "=", forced, " but this build's ", family_name(f),
                                       " kernels cannot run on ", device_name(device), " (built for CUDA archs ",
                                       CHIPLET_FA_GPU_ARCHS, ")"));
    return f;
  }
  if (runs(KernelFamily::kSm90, cc)) return KernelFamily::kSm90;
  if (!runs(KernelFamily::kMmaSync, cc))
    throw std::runtime_error(message("chiplet_fa: this build has no kernels for ", device_name(device),
                                     ": it was built for CUDA archs ", CHIPLET_FA_GPU_ARCHS,
                                     "; rebuild with CHIPLET_FA_CUDA_ARCHS=", cc == 90 ? "90a" : std::to_string(cc),
                                     " or leave it unset on a machine with this GPU"));
  return KernelFamily::kMmaSync;
}
#endif

}  // namespace

int current_device() {
  int device = 0;
  check_runtime(cfaGetDevice(&device) == cfaSuccess, "chiplet_fa: cannot query the current GPU");
  return device;
}

KernelFamily kernel_family(int device_index) { return pick(device_index); }

std::string kernel_path(int device_index) {
  return std::string(family_name(kernel_family(device_index))) + " on " + device_name(device_index);
}

}  // namespace chiplet_fa
