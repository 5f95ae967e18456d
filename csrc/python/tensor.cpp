#include "python/tensor.h"

#include <stdexcept>

namespace chiplet_fa::py {
namespace {

// torch, imported by chiplet_fa before _C; held for the process (no destructor after finalisation).
PyObject* torch() {
  static PyObject* module = nullptr;
  if (!module) module = check(PyImport_ImportModule("torch")).release();
  return module;
}

Ref attr(PyObject* o, const char* name) { return check(PyObject_GetAttrString(o, name)); }
Ref call_method(PyObject* o, const char* name) { return check(PyObject_CallMethod(o, name, nullptr)); }

std::string str(PyObject* o) {
  Ref s = check(PyObject_Str(o));
  return from_py<std::string>(s.get(), {"str", "object"});
}

// "torch.float16" -> "float16"
std::string without_prefix(const std::string& name) { return name.rfind("torch.", 0) == 0 ? name.substr(6) : name; }

void* data_of(PyObject* t) {
  void* data = PyLong_AsVoidPtr(call_method(t, "data_ptr").get());
  if (!data && PyErr_Occurred()) throw PythonError{};
  return data;
}

}  // namespace

NewTensor empty_tensor(const std::vector<int64_t>& shape, const char* dtype) {
  Ref args = tuple(shape);
  Ref kwargs = dict({{"dtype", attr(torch(), dtype)}});
  Ref t = check(PyObject_Call(attr(torch(), "empty").get(), args.get(), kwargs.get()));
  void* data = data_of(t.get());
  return {std::move(t), data};
}

NewTensor empty_like(PyObject* like) {
  Ref t = check(PyObject_CallFunctionObjArgs(attr(torch(), "empty_like").get(), like, nullptr));
  void* data = data_of(t.get());
  return {std::move(t), data};
}

int64_t numel(PyObject* t) { return from_py<int64_t>(call_method(t, "numel").get(), {"numel", "tensor"}); }

void* cpu_tensor_data(PyObject* t, const std::string& what, const char* dtype, int64_t n) {
  const int is_tensor = PyObject_IsInstance(t, attr(torch(), "Tensor").get());
  if (is_tensor < 0) throw PythonError{};
  const std::string expected = what + " must be a contiguous CPU " + dtype + " tensor" +
                               (n >= 0 ? " of " + std::to_string(n) + " elements" : "");
  if (!is_tensor) throw std::invalid_argument(expected + ", got " + type_name(t));
  const bool ok = str(attr(attr(t, "device").get(), "type").get()) == "cpu" &&
                  attr(t, "dtype").get() == attr(torch(), dtype).get() &&
                  from_py<bool>(call_method(t, "is_contiguous").get(), {"is_contiguous", "tensor"}) &&
                  (n < 0 || numel(t) == n);
  if (!ok)
    throw std::invalid_argument(expected + ", got " + without_prefix(str(attr(t, "dtype").get())) + " " +
                                str(attr(t, "shape").get()) + " on " + str(attr(t, "device").get()));
  return data_of(t);
}

TensorInfo tensor_info(PyObject* t, const Where& w) {
  const int is_tensor = PyObject_IsInstance(t, attr(torch(), "Tensor").get());
  if (is_tensor < 0) throw PythonError{};
  if (!is_tensor) type_error(w, "a torch.Tensor", t);
  Ref device = attr(t, "device");
  Ref index = attr(device.get(), "index");
  TensorInfo info{str(attr(device.get(), "type").get()) == "cuda",
                  index.get() == Py_None ? -1 : from_py<int>(index.get(), w),
                  without_prefix(str(attr(t, "dtype").get())),
                  from_py<int64_t>(call_method(t, "dim").get(), w), 0};
  if (info.dim > 0) info.last_size = from_py<int64_t>(check(PyObject_CallMethod(t, "size", "i", -1)).get(), w);
  return info;
}

DType dtype_named(const std::string& name) {
  if (name == "float16") return DType::kFloat16;
  if (name == "bfloat16") return DType::kBFloat16;
  if (name == "float32") return DType::kFloat32;
  if (name == "float64") return DType::kFloat64;
  throw std::invalid_argument("chiplet_fa: unsupported dtype " + name +
                              " (expected float16, bfloat16, float32 or float64)");
}

std::string dtype_name(PyObject* dtype, const Where& w) {
  const int is_dtype = PyObject_IsInstance(dtype, attr(torch(), "dtype").get());
  if (is_dtype < 0) throw PythonError{};
  if (!is_dtype) type_error(w, "a torch.dtype", dtype);
  return without_prefix(str(dtype));
}

}  // namespace chiplet_fa::py
