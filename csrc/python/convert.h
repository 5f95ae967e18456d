// Conversions between the C++ values the bindings take and return and Python objects, on
// CPython's limited API (Py_LIMITED_API, abi3): integers, floats, bools, strings, None as an
// empty optional, sequences as vectors and arrays, tuples and pairs. A failed conversion raises
// TypeError naming the function and argument, as the signature was written.
#pragma once
#include <Python.h>

#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace chiplet_fa::py {

// Thrown where a Python exception is already set: the binding returns NULL to raise it.
struct PythonError {};

// An owned reference.
class Ref {
 public:
  Ref() = default;
  explicit Ref(PyObject* owned) : obj_(owned) {}
  static Ref borrow(PyObject* o) {
    Py_XINCREF(o);
    return Ref(o);
  }
  Ref(const Ref& r) : obj_(r.obj_) { Py_XINCREF(obj_); }
  Ref(Ref&& r) noexcept : obj_(r.release()) {}
  Ref& operator=(Ref r) noexcept {
    std::swap(obj_, r.obj_);
    return *this;
  }
  ~Ref() { Py_XDECREF(obj_); }
  PyObject* get() const { return obj_; }
  PyObject* release() { return std::exchange(obj_, nullptr); }
  explicit operator bool() const { return obj_ != nullptr; }

 private:
  PyObject* obj_ = nullptr;
};

// The result of a C API call that returns a new reference, or PythonError when it raised.
inline Ref check(PyObject* result) {
  if (!result) throw PythonError{};
  return Ref(result);
}

// What a conversion converts, for its error message: "<function>(): argument '<arg>'".
struct Where {
  const char* function;
  const char* arg;
};

std::string type_name(PyObject* o);
[[noreturn]] void type_error(const Where& w, const char* expected, PyObject* got);

template <class T, class = void>
struct Convert;

template <class T>
T from_py(PyObject* o, const Where& w) {
  return Convert<T>::from(o, w);
}
template <class T>
Ref to_py(const T& value) {
  return Convert<T>::to(value);
}

// Integers: Python ints and objects with __index__ (not floats), in the C++ type's range.
template <class T>
struct Convert<T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>>> {
  static T from(PyObject* o, const Where& w) {
    Ref index(PyNumber_Index(o));
    if (!index) {
      PyErr_Clear();
      type_error(w, "an integer", o);
    }
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(index.get(), &overflow);
    if (v == -1 && PyErr_Occurred()) throw PythonError{};
    using Limits = std::numeric_limits<T>;
    if (overflow || v < static_cast<long long>(Limits::min()) ||
        (v > 0 && static_cast<unsigned long long>(v) > static_cast<unsigned long long>(Limits::max())))
      type_error(w, std::is_signed_v<T> ? "an integer in the C++ int range" : "a non-negative integer", o);
    return static_cast<T>(v);
  }
  static Ref to(T v) {
    if constexpr (std::is_signed_v<T>) return check(PyLong_FromLongLong(v));
    else return check(PyLong_FromUnsignedLongLong(v));
  }
};

template <>
struct Convert<bool> {
  static bool from(PyObject* o, const Where&) {
    const int v = PyObject_IsTrue(o);
    if (v < 0) throw PythonError{};
    return v != 0;
  }
  static Ref to(bool v) { return check(PyBool_FromLong(v)); }
};

template <>
struct Convert<double> {
  static double from(PyObject* o, const Where& w) {
    const double v = PyFloat_AsDouble(o);
    if (v == -1.0 && PyErr_Occurred()) {
      PyErr_Clear();
      type_error(w, "a float", o);
    }
    return v;
  }
  static Ref to(double v) { return check(PyFloat_FromDouble(v)); }
};

template <>
struct Convert<float> {
  static Ref to(float v) { return check(PyFloat_FromDouble(v)); }
};

template <>
struct Convert<std::string> {
  static std::string from(PyObject* o, const Where& w) {
    if (!PyUnicode_Check(o)) type_error(w, "a str", o);
    Py_ssize_t size = 0;
    const char* s = PyUnicode_AsUTF8AndSize(o, &size);
    if (!s) throw PythonError{};
    return std::string(s, size_t(size));
  }
  static Ref to(const std::string& v) { return check(PyUnicode_FromStringAndSize(v.data(), Py_ssize_t(v.size()))); }
};

template <>
struct Convert<const char*> {
  static Ref to(const char* v) { return check(PyUnicode_FromString(v)); }
};

template <size_t N>
struct Convert<char[N]> : Convert<const char*> {};

// A Python object passed through as is.
template <>
struct Convert<Ref> {
  static Ref from(PyObject* o, const Where&) { return Ref::borrow(o); }
  static Ref to(const Ref& v) { return v; }
};

template <class T>
struct Convert<std::optional<T>> {
  static std::optional<T> from(PyObject* o, const Where& w) {
    if (o == Py_None) return std::nullopt;
    return from_py<T>(o, w);
  }
  static Ref to(const std::optional<T>& v) { return v ? to_py(*v) : Ref::borrow(Py_None); }
};

// The items of a sequence (a list, tuple, tensor; not a str), each converted.
template <class T>
std::vector<T> items_of(PyObject* o, const Where& w) {
  if (PyUnicode_Check(o) || !PySequence_Check(o)) type_error(w, "a sequence", o);
  const Py_ssize_t n = PySequence_Size(o);
  if (n < 0) throw PythonError{};
  std::vector<T> out;
  out.reserve(size_t(n));
  for (Py_ssize_t i = 0; i < n; ++i) out.push_back(from_py<T>(check(PySequence_GetItem(o, i)).get(), w));
  return out;
}

template <class T>
struct Convert<std::vector<T>> {
  static std::vector<T> from(PyObject* o, const Where& w) { return items_of<T>(o, w); }
  static Ref to(const std::vector<T>& v) {
    Ref list = check(PyList_New(Py_ssize_t(v.size())));
    for (size_t i = 0; i < v.size(); ++i) PyList_SetItem(list.get(), Py_ssize_t(i), to_py(v[i]).release());
    return list;
  }
};

template <class T, size_t N>
struct Convert<std::array<T, N>> {
  static std::array<T, N> from(PyObject* o, const Where& w) {
    const std::vector<T> v = items_of<T>(o, w);
    if (v.size() != N) type_error(w, ("a sequence of " + std::to_string(N) + " items").c_str(), o);
    std::array<T, N> out;
    for (size_t i = 0; i < N; ++i) out[i] = v[i];
    return out;
  }
};

template <class... T>
Ref tuple(const T&... values) {
  Ref t = check(PyTuple_New(Py_ssize_t(sizeof...(T))));
  Py_ssize_t i = 0;
  (PyTuple_SetItem(t.get(), i++, to_py(values).release()), ...);
  return t;
}

template <class... T>
struct Convert<std::tuple<T...>> {
  static std::tuple<T...> from(PyObject* o, const Where& w) {
    const std::vector<Ref> v = items_of<Ref>(o, w);
    if (v.size() != sizeof...(T)) type_error(w, "a tuple of the right length", o);
    return from_items(v, w, std::index_sequence_for<T...>{});
  }
  template <size_t... I>
  static std::tuple<T...> from_items(const std::vector<Ref>& v, const Where& w, std::index_sequence<I...>) {
    return std::tuple<T...>{from_py<T>(v[I].get(), w)...};
  }
  static Ref to(const std::tuple<T...>& v) {
    return std::apply([](const T&... x) { return tuple(x...); }, v);
  }
};

template <class A, class B>
struct Convert<std::pair<A, B>> {
  static std::pair<A, B> from(PyObject* o, const Where& w) {
    auto [a, b] = Convert<std::tuple<A, B>>::from(o, w);
    return {std::move(a), std::move(b)};
  }
  static Ref to(const std::pair<A, B>& v) { return tuple(v.first, v.second); }
};

// A dict with str keys, from (key, value) pairs of converted values.
Ref dict(std::initializer_list<std::pair<const char*, Ref>> items);
void set_item(const Ref& dict, const std::string& key, const Ref& value);

}  // namespace chiplet_fa::py
