// The kernel family a translation unit builds. A unit that instantiates kernels names its family
// before any include (the generated units in kernels/instantiations/<family>/ do):
//   CFA_FAMILY_MMA_SYNC  NVIDIA sm_80 and later: warp-level mma.sync (sm80.h)
//   CFA_FAMILY_SM90      NVIDIA sm_90a: warpgroup wgmma, warp-specialised kernels (sm90.h)
//   CFA_FAMILY_CDNA3     AMD gfx942: MFMA (cdna3.h)
// Every family's arch layer and kernels live in namespace chiplet_fa::CFA_FAMILY, so one library
// holds several families without two definitions sharing a name; the host picks one per call
// (ops/gpu/device_family.h).
#pragma once
#include "arch/kernel_family.h"
#include "platform.h"

#if defined(CFA_FAMILY_SM90)
#define CFA_FAMILY sm90
#define CFA_FAMILY_VALUE KernelFamily::kSm90
#elif defined(CFA_FAMILY_MMA_SYNC)
#define CFA_FAMILY mma_sync
#define CFA_FAMILY_VALUE KernelFamily::kMmaSync
#elif defined(CFA_FAMILY_CDNA3)
#define CFA_FAMILY cdna3
#define CFA_FAMILY_VALUE KernelFamily::kCdna3
#else
#error "define CFA_FAMILY_MMA_SYNC, CFA_FAMILY_SM90 or CFA_FAMILY_CDNA3 before including kernel headers"
#endif

#if (defined(CFA_FAMILY_SM90) || defined(CFA_FAMILY_MMA_SYNC)) && !defined(CFA_CUDA)
#error "the NVIDIA kernel families compile as CUDA"
#endif
#if defined(CFA_FAMILY_CDNA3) && !defined(CFA_HIP) && !defined(CFA_EMULATE)
#error "the CDNA3 kernel family compiles as HIP, or as host C++ in an emulated build (CHIPLET_FA_EMULATE=cdna3)"
#endif
#if defined(CFA_FAMILY_CDNA3) && defined(CFA_EMULATE)
#include "emulate/device.h"  // HIP's device API, run by the emulator
#endif

namespace chiplet_fa::CFA_FAMILY {
inline constexpr KernelFamily kFamily = CFA_FAMILY_VALUE;
}  // namespace chiplet_fa::CFA_FAMILY
