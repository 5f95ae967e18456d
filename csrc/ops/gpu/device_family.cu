#include "ops/gpu/device_family.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include <c10/util/Exception.h>

#include "build_config.h"
#include "platform.h"

namespace chiplet_fa {
namespace {

#if defined(CFA_HIP)
// gcnArchName carries feature flags ("gfx942:sramecc+:xnack-"); the build lists bare targets.
std::string device_arch(const c10::Device& device) {
  hipDeviceProp_t prop;
  TORCH_CHECK(hipGetDeviceProperties(&prop, device.index()) == hipSuccess, "chiplet_fa: cannot query ", device);
  const std::string arch = prop.gcnArchName;
  return arch.substr(0, arch.find(':'));
}

std::string describe(const c10::Device& device) { return device_arch(device); }

bool built_for(const std::string& arch) {
  const std::string list = std::string(";") + CHIPLET_FA_GPU_ARCHS + ";";
  return list.find(";" + arch + ";") != std::string::npos;
}

KernelFamily pick(const c10::Device& device) {
  const std::string arch = device_arch(device);
  TORCH_CHECK(built_for(arch), "chiplet_fa: this build has no kernels for ", arch, " (built for ",
              CHIPLET_FA_GPU_ARCHS, "); rebuild with PYTORCH_ROCM_ARCH=", arch,
              " or leave it unset on a machine with this GPU");
  return KernelFamily::kCdna3;
}
#else
constexpr int kMmaSyncSass[] = {0, CHIPLET_FA_MMA_SYNC_SASS};  // 0: keeps the array non-empty
constexpr int kMmaSyncPtx = CHIPLET_FA_MMA_SYNC_PTX;           // 0: none

// Two attribute queries, cheap enough for every call (the full properties are not).
int compute_capability(const c10::Device& device) {
  int major = 0, minor = 0;
  TORCH_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device.index()) == cudaSuccess &&
                  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device.index()) == cudaSuccess,
              "chiplet_fa: cannot query ", device);
  return major * 10 + minor;
}

std::string describe(const c10::Device& device) {
  cudaDeviceProp prop;
  TORCH_CHECK(cudaGetDeviceProperties(&prop, device.index()) == cudaSuccess, "chiplet_fa: cannot query ", device);
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

KernelFamily pick(const c10::Device& device) {
  const int cc = compute_capability(device);
  const char* env = std::getenv(kKernelEnv);
  const std::string forced = env ? env : "";
  TORCH_CHECK_VALUE(forced.empty() || forced == "auto" || forced == "mma_sync" || forced == "sm90" ||
                        forced == "wgmma",
                    "chiplet_fa: ", kKernelEnv, " must be auto, mma_sync or sm90 (alias wgmma), got '", forced, "'");
  if (forced == "mma_sync" || forced == "sm90" || forced == "wgmma") {
    const KernelFamily f = forced == "mma_sync" ? KernelFamily::kMmaSync : KernelFamily::kSm90;
    TORCH_CHECK(runs(f, cc), "chiplet_fa: ", kKernelEnv, "=", forced, " but this build's ", family_name(f),
                " kernels cannot run on ", describe(device), " (built for CUDA archs ", CHIPLET_FA_GPU_ARCHS, ")");
    return f;
  }
  if (runs(KernelFamily::kSm90, cc)) return KernelFamily::kSm90;
  TORCH_CHECK(runs(KernelFamily::kMmaSync, cc), "chiplet_fa: this build has no kernels for ", describe(device),
              ": it was built for CUDA archs ", CHIPLET_FA_GPU_ARCHS, "; rebuild with CHIPLET_FA_CUDA_ARCHS=",
              cc == 90 ? "90a" : std::to_string(cc), " or leave it unset on a machine with this GPU");
  return KernelFamily::kMmaSync;
}
#endif

}  // namespace

KernelFamily kernel_family(const c10::Device& device) {
  TORCH_CHECK(device.is_cuda(), "chiplet_fa: kernel families exist for GPU devices, got ", device);
  return pick(device);
}

std::string kernel_path(const c10::Device& device) {
  return std::string(family_name(kernel_family(device))) + " on " + describe(device);
}

}  // namespace chiplet_fa
