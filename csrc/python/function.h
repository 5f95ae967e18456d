// Module functions with keyword arguments and defaults on the limited API: a signature (names,
// defaults converted once at import) binds a call's positional and keyword arguments to
// parameters, as Python does, and each is converted to the C++ function's parameter type. C++
// exceptions become Python's: std::invalid_argument ValueError, std::out_of_range IndexError,
// any other std::exception RuntimeError.
#pragma once
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "python/convert.h"

namespace chiplet_fa::py {

// A parameter: its name and, when it has one, its default.
struct Arg {
  const char* name;
  Ref default_value;  // empty: required
};
inline Arg arg(const char* name) { return {name, {}}; }
template <class T>
Arg arg(const char* name, const T& default_value) {
  return {name, to_py(default_value)};
}
inline Arg arg(const char* name, const char* default_value) { return {name, to_py(default_value)}; }
inline Arg arg_none(const char* name) { return {name, Ref::borrow(Py_None)}; }

struct Signature {
  std::string function;
  std::vector<Arg> args;
  // One borrowed object per parameter from a call's arguments and the defaults, or TypeError.
  std::vector<PyObject*> bind(PyObject* args, PyObject* kwargs) const;
  Where where(size_t i) const { return {function.c_str(), args[i].name}; }
};

// Sets the Python exception for the C++ exception being handled; returns NULL to raise it.
PyObject* raise_current_exception();

// The GIL released for the scope: C++ that calls no Python API meanwhile.
class GilReleased {
 public:
  GilReleased() : state_(PyEval_SaveThread()) {}
  ~GilReleased() { PyEval_RestoreThread(state_); }
  GilReleased(const GilReleased&) = delete;
  GilReleased& operator=(const GilReleased&) = delete;

 private:
  PyThreadState* state_;
};

using Invoke = std::function<Ref(const Signature&, const std::vector<PyObject*>&)>;

// Adds function `name` to `module`.
void add_function(PyObject* module, Signature sig, Invoke invoke, const char* doc);

template <class R, class... A, size_t... I>
Ref call(R (*fn)(A...), const Signature& sig, const std::vector<PyObject*>& slots, std::index_sequence<I...>) {
  // Braced initialisation converts the arguments left to right.
  std::tuple<std::decay_t<A>...> values{from_py<std::decay_t<A>>(slots[I], sig.where(I))...};
  if constexpr (std::is_void_v<R>) {
    std::apply(fn, std::move(values));
    return Ref::borrow(Py_None);
  } else {
    return to_py(std::apply(fn, std::move(values)));
  }
}

// def(module, "name", fn, {arg("a"), arg("b", 1)}, "doc"): one Arg per parameter of fn.
template <class R, class... A>
void def(PyObject* module, const char* name, R (*fn)(A...), std::vector<Arg> args, const char* doc) {
  if (args.size() != sizeof...(A)) throw std::logic_error(std::string(name) + ": one Arg per parameter");
  add_function(module, Signature{name, std::move(args)},
               [fn](const Signature& sig, const std::vector<PyObject*>& slots) {
                 return call(fn, sig, slots, std::index_sequence_for<A...>{});
               },
               doc);
}

// A submodule `name` of `parent` (an attribute, as pybind11's def_submodule made it).
PyObject* add_submodule(PyObject* parent, const char* name, const char* doc);

}  // namespace chiplet_fa::py
