// The module's calls into the torch-facing code for a GPU, given its ordinal. This file is the
// one remaining use of torch's C++ API in the module: those functions take a c10::Device (and
// fwd_tile_rows a tensor) until they take the ordinal; each body then becomes the plain call.
// Their c10 errors become the standard exceptions the bindings translate.
#include <stdexcept>

#include <c10/core/Device.h>
#include <c10/util/Exception.h>

#include "build_config.h"
#include "python/device.h"
#if CHIPLET_FA_GPU
#include <ATen/ATen.h>

#include "ops/gpu/device_family.h"
#endif

namespace chiplet_fa {

namespace gpu {
namespace {

c10::Device cuda(int index) { return c10::Device(c10::DeviceType::CUDA, c10::DeviceIndex(index)); }

template <class F>
auto translated(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const c10::ValueError& e) {
    throw std::invalid_argument(e.what_without_backtrace());
  } catch (const c10::Error& e) {
    throw std::runtime_error(e.what_without_backtrace());
  }
}

}  // namespace

int detect_num_xcds(int device_index) {
  return translated([&] { return chiplet_fa::detect_num_xcds(cuda(device_index)); });
}

XcdDetection detect_xcds(int device_index) {
  return translated([&] { return chiplet_fa::detect_xcds(cuda(device_index)); });
}

#if CHIPLET_FA_GPU
std::string kernel_path(int device_index) {
  return translated([&] { return chiplet_fa::kernel_path(cuda(device_index)); });
}

int fwd_tile_rows(DType dtype, int head_dim, int device_index) {
  const c10::ScalarType type = dtype == DType::kFloat16    ? c10::kHalf
                               : dtype == DType::kBFloat16 ? c10::kBFloat16
                               : dtype == DType::kFloat32  ? c10::kFloat
                                                           : c10::kDouble;
  return translated([&] {
    const at::Tensor q = at::empty({0, 0, 0, head_dim}, at::TensorOptions(type).device(cuda(device_index)));
    return chiplet_fa::fwd_tile_rows(q);
  });
}
#endif

}  // namespace gpu
}  // namespace chiplet_fa
