// The tensor layer of the operators, on torch's stable ABI only (torch/csrc/stable, torch/headeronly):
// the translation units that include it use no libtorch C++ symbol, and CMakeLists.txt compiles them
// with TORCH_TARGET_VERSION 2.11, so torch's headers hide anything newer. Errors: std::invalid_argument
// reaches Python as ValueError, std::runtime_error as RuntimeError (check_value, check_runtime).
//
// What the stable API of torch 2.11 lacks that this code used, and what it does instead:
//   - zeros, zeros_like, constant_pad_nd, Tensor::options(): new_zeros, pad, new_empty (like a tensor);
//   - linalg_vector_norm (max |x|, the fixed-point dQ's scale): aten::abs through the dispatcher, then
//     amax (abs_max below); stack: copy_ into a preallocated tensor's rows;
//   - cat, stack, arange, index, index_put_, floor_divide, remainder, min, max, item (the CPU
//     decoding path and its value checks): plain loops over the CPU tensors' data;
//   - TORCH_CHECK's formatting of dtypes, devices and shapes: check_value, check_runtime, describe;
//   - TORCH_WARN: aoti_torch_warn (a Python UserWarning), in mapping/topology.cpp;
//   - at::get_num_threads: torch::stable::get_num_threads; at::in_parallel_region: none (the CPU
//     kernels start their own threads, and no torch parallel region calls the operators);
//   - at::get_cpu_capability: the CPU's features and ATEN_CPU_CAPABILITY, read as torch does (cpu/isa.cpp);
//   - a device's properties: the CUDA/HIP runtime (ops/gpu/device_family.cu);
//   - the current CUDA/HIP stream: 2.11's device-generic Stream gives an id only (its native handle
//     came in 2.13), so the GPU bindings ask the CUDA shim (ops/gpu/binding_common.h).
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

namespace chiplet_fa {

using Tensor = torch::stable::Tensor;
using ScalarType = torch::headeronly::ScalarType;
using OptTensor = std::optional<Tensor>;
using Half = torch::headeronly::Half;
using BFloat16 = torch::headeronly::BFloat16;
using Sizes = torch::headeronly::IntHeaderOnlyArrayRef;

// "Float", "cuda:0", "[2, 3]": how torch prints them in its messages.
inline std::string describe(ScalarType t) { return torch::headeronly::toString(t); }
inline std::string describe(const torch::stable::Device& d) {
  std::string s = d.is_cuda() ? "cuda" : d.is_cpu() ? "cpu" : "device type " + std::to_string(int(d.type()));
  return d.has_index() ? s + ":" + std::to_string(d.index()) : s;
}
inline std::string joined(Sizes sizes) {
  std::string s;
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s;
}
inline std::string describe(Sizes sizes) {
  std::string s = "[";  // built in steps: gcc 12's -Wrestrict misfires on "[" + joined(sizes) + "]"
  s += joined(sizes);
  return s += "]";
}
template <typename T>
const T& describe(const T& x) {
  return x;
}

template <typename... Args>
std::string message(const Args&... args) {
  std::ostringstream out;
  (out << ... << describe(args));
  return out.str();
}

// Bad input: ValueError in Python; the message names the argument.
template <typename... Args>
void check_value(bool ok, const Args&... args) {
  if (!ok) [[unlikely]] throw std::invalid_argument(message(args...));
}

// A failure that is not the input's (no kernel built, a launch failed): RuntimeError.
template <typename... Args>
void check_runtime(bool ok, const Args&... args) {
  if (!ok) [[unlikely]] throw std::runtime_error(message(args...));
}

// Uninitialised / zeroed tensors on `like`'s device.
inline Tensor empty_on(const Tensor& like, Sizes sizes, ScalarType dtype) {
  return torch::stable::new_empty(like, sizes, dtype);
}
inline Tensor zeros_on(const Tensor& like, Sizes sizes, ScalarType dtype) {
  return torch::stable::new_zeros(like, sizes, dtype);
}

// dst = src (dst a view or a tensor handle: the data is written, the handle not).
inline void copy_into(Tensor dst, const Tensor& src) { torch::stable::copy_(dst, src); }

// max |x| (torch.linalg.vector_norm(x, inf)) as a 0-D tensor of x's dtype: aten::abs through the
// dispatcher, then amax over every dimension.
inline Tensor abs_max(const Tensor& x) {
  std::array<StableIValue, 1> stack{torch::stable::detail::from(x)};
  TORCH_ERROR_CODE_CHECK(torch_call_dispatcher("aten::abs", "", stack.data(), TORCH_ABI_VERSION));
  return torch::stable::amax(torch::stable::detail::to<Tensor>(stack[0]), Sizes{});
}

}  // namespace chiplet_fa
