// sm_90 tensor memory access (TMA): the copy engine moves a box of a tensor of up to 5 dims from
// global to shared memory on one thread's instruction, applying the 128-byte swizzle of
// SmemTile's panels (16-byte chunk index XOR row % 8) and zero-filling what lies outside the
// tensor, and reports the bytes it wrote to an mbarrier (complete_tx). A producer then spends a
// few instructions a tile where cp.async spent one per 16 bytes and thread.
// The host describes each tensor once per call (TensorMap, passed to the kernel by value as part
// of a __grid_constant__ parameter).
#pragma once
#include <cuda.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "nvidia_common.h"

namespace chiplet_fa::CFA_FAMILY::arch {

// A box is one swizzle row wide: 128 bytes, 64 columns of 16-bit elements (a panel of a tile).
constexpr int kTmaBoxBytes = 128;
constexpr int kTmaBoxCols = kTmaBoxBytes / 2;

// Arrival of this thread that also tells the barrier to wait for `bytes` more from the copy engine.
CFA_DEVICE void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n}\n" ::"r"(
                   smem_u32(bar)),
               "r"(bytes)
               : "memory");
}

// Copies the box at element coordinates (c0 = column, c1 = row, c2 = head, c3 = batch) of `map`
// into shared memory at dst (1024-byte aligned for the swizzle) and completes its bytes on bar.
CFA_DEVICE void tma_load_4d(void* dst, const CUtensorMap* map, int32_t c0, int32_t c1, int32_t c2, int32_t c3,
                            uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, "
      "%5}], [%6];\n" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_u32(bar))
      : "memory");
}

// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to shared memory
// and completes them on bar, like tma_load_4d.
CFA_DEVICE void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
}

// Adds the box in shared memory at src (1024-byte aligned, swizzled as the map says) to the fp32
// tensor of `map` at (c0, c1, c2, c3), element-wise and atomically; parts outside the tensor are
// dropped. A bulk group's operation: bulk_commit, then bulk_wait_read before src is rewritten
// (arch/sm90_bulk.h); src written by threads must be fenced for the async proxy first.
CFA_DEVICE void tma_reduce_add_4d(const CUtensorMap* map, const void* src, int32_t c0, int32_t c1, int32_t c2,
                                  int32_t c3) {
  asm volatile("cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.bulk_group [%0, {%1, %2, %3, %4}], [%5];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_u32(src))
               : "memory");
}

// A 4-D tensor, (cols, rows, heads, batch) innermost first, with the byte strides of rows, heads
// and batch; moved in boxes of one swizzle row (kTmaBoxBytes) x box_rows, 128-byte swizzled.
// Strides must be multiples of 16 bytes and the base 16-byte aligned (kernel_layout gives both).
enum class TmaElement { kBFloat16, kFloat16, kFloat32, kInt32 };
constexpr int element_bytes(TmaElement e) { return e == TmaElement::kFloat32 || e == TmaElement::kInt32 ? 4 : 2; }
struct TensorDesc {
  const void* base;
  TmaElement element;
  uint64_t dims[4];
  uint64_t strides[3];
  uint32_t box_rows;
};

inline CUtensorMap make_tensor_map(const TensorDesc& d, const char* name) {
  using Encode = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                              const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                              CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  // The driver's entry point, found once through the runtime (no link against libcuda).
  static const Encode encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      fn = nullptr;
    return reinterpret_cast<Encode>(fn);
  }();
  if (!encode) throw std::runtime_error("chiplet_fa: the CUDA driver offers no cuTensorMapEncodeTiled (TMA)");
  CUtensorMap map;
  const cuuint32_t box[4] = {uint32_t(kTmaBoxBytes / element_bytes(d.element)), d.box_rows, 1, 1};
  const cuuint32_t unit[4] = {1, 1, 1, 1};
  const CUtensorMapDataType type = d.element == TmaElement::kFloat32    ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                   : d.element == TmaElement::kInt32    ? CU_TENSOR_MAP_DATA_TYPE_INT32
                                   : d.element == TmaElement::kBFloat16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                                        : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const CUresult r = encode(&map, type, 4,
                            const_cast<void*>(d.base), d.dims, d.strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::runtime_error(std::string("chiplet_fa: cannot describe ") + name + " for TMA (CUresult " +
                             std::to_string(int(r)) + ")");
  return map;
}

}  // namespace chiplet_fa::CFA_FAMILY::arch
