// Which kernel family runs on a device, chosen per call from the device and what this build holds:
// on NVIDIA the sm90 family (wgmma, warp-specialised) on compute capability 9.0, else mma_sync on
// any GPU one of its built architectures runs on, directly or through its PTX (sm_80, 86, 89, and
// newer GPUs without a family of their own); on AMD the cdna3 family. CHIPLET_FA_KERNEL=mma_sync
// or sm90 (alias wgmma) forces one; a device that cannot run the forced family raises.
#pragma once
#include <cstdint>
#include <string>

#include "arch/dtype.h"
#include "arch/kernel_family.h"

namespace chiplet_fa {

constexpr const char* kKernelEnv = "CHIPLET_FA_KERNEL";

// The calling thread's current GPU (torch's ordinal), for a device named without an index.
int current_device();

// GPU `device_index` (torch's ordinal). Raises RuntimeError naming the device and the build when no
// built family can run on it.
KernelFamily kernel_family(int device_index);

// "<family> on <device name> (<arch>)", for build_info() and explain().
std::string kernel_path(int device_index);

// Query rows per forward tile of the kernel a call of this dtype and head dim on GPU device_index
// runs, for explain(), which models the op's tiles (defined with the forward binding, fwd_gpu.cu).
int fwd_tile_rows(DType dtype, int64_t head_dim, int device_index);

}  // namespace chiplet_fa
