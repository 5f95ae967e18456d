// torch tensors for the bindings without torch's C++ API: made and inspected through torch's
// Python API, so only contiguous CPU tensors, whose data the C++ side then reads or fills.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "arch/dtype.h"
#include "python/convert.h"

namespace chiplet_fa::py {

// A new contiguous CPU tensor, torch.empty(shape, dtype=torch.<dtype>), and its data.
struct NewTensor {
  Ref tensor;
  void* data;
};
NewTensor empty_tensor(const std::vector<int64_t>& shape, const char* dtype);
// torch.empty_like(t) of a contiguous CPU tensor t.
NewTensor empty_like(PyObject* t);

// The data of `t`, a contiguous CPU tensor of torch.<dtype> with `numel` elements (-1: any), or a
// ValueError naming it (`what`).
void* cpu_tensor_data(PyObject* t, const std::string& what, const char* dtype, int64_t numel = -1);
int64_t numel(PyObject* t);

// What the op looks at to pick a kernel for a tensor: its device, dtype and shape.
struct TensorInfo {
  bool cuda;
  int device_index;  // -1: none given
  std::string dtype;  // "float16", "bfloat16", ...
  int64_t dim, last_size;
};
TensorInfo tensor_info(PyObject* t, const Where& w);

// The element type of a torch dtype name, or ValueError for one no kernel takes.
DType dtype_named(const std::string& name);
// The name of a torch.dtype object ("float16"), or TypeError.
std::string dtype_name(PyObject* dtype, const Where& w);

}  // namespace chiplet_fa::py
