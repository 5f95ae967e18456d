#include "python/function.h"

#include <stdexcept>

namespace chiplet_fa::py {

std::string type_name(PyObject* o) {
  Ref name(PyObject_GetAttrString(reinterpret_cast<PyObject*>(Py_TYPE(o)), "__name__"));
  if (!name) {
    PyErr_Clear();
    return "?";
  }
  const char* s = PyUnicode_AsUTF8AndSize(name.get(), nullptr);
  if (!s) PyErr_Clear();
  return s ? s : "?";
}

void type_error(const Where& w, const char* expected, PyObject* got) {
  const std::string message = std::string(w.function) + "(): argument '" + w.arg + "' must be " + expected +
                              ", got " + type_name(got);
  PyErr_SetString(PyExc_TypeError, message.c_str());
  throw PythonError{};
}

Ref dict(std::initializer_list<std::pair<const char*, Ref>> items) {
  Ref d = check(PyDict_New());
  for (const auto& [key, value] : items)
    if (PyDict_SetItemString(d.get(), key, value.get()) < 0) throw PythonError{};
  return d;
}

void set_item(const Ref& d, const std::string& key, const Ref& value) {
  if (PyDict_SetItemString(d.get(), key.c_str(), value.get()) < 0) throw PythonError{};
}

namespace {

[[noreturn]] void call_error(const Signature& sig, const std::string& what) {
  PyErr_SetString(PyExc_TypeError, (sig.function + "(): " + what).c_str());
  throw PythonError{};
}

}  // namespace

std::vector<PyObject*> Signature::bind(PyObject* call_args, PyObject* kwargs) const {
  std::vector<PyObject*> slots(args.size(), nullptr);
  const Py_ssize_t given = PyTuple_Size(call_args);
  if (given > Py_ssize_t(args.size()))
    call_error(*this, "takes at most " + std::to_string(args.size()) + " arguments (" + std::to_string(given) +
                          " given)");
  for (Py_ssize_t i = 0; i < given; ++i) slots[size_t(i)] = PyTuple_GetItem(call_args, i);
  Py_ssize_t pos = 0;
  PyObject *key, *value;
  while (kwargs && PyDict_Next(kwargs, &pos, &key, &value)) {
    const std::string name = from_py<std::string>(key, {function.c_str(), "keyword"});
    size_t i = 0;
    while (i < args.size() && name != args[i].name) ++i;
    if (i == args.size()) call_error(*this, "unexpected keyword argument '" + name + "'");
    if (slots[i]) call_error(*this, "got multiple values for argument '" + name + "'");
    slots[i] = value;
  }
  for (size_t i = 0; i < args.size(); ++i) {
    if (!slots[i]) slots[i] = args[i].default_value.get();
    if (!slots[i]) call_error(*this, "missing required argument '" + std::string(args[i].name) + "'");
  }
  return slots;
}

PyObject* raise_current_exception() {
  try {
    throw;
  } catch (const PythonError&) {
  } catch (const std::invalid_argument& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const std::out_of_range& e) {
    PyErr_SetString(PyExc_IndexError, e.what());
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

namespace {

constexpr const char* kCapsule = "chiplet_fa._C function";

struct Function {
  Signature sig;
  Invoke invoke;
  PyMethodDef def;
};

PyObject* call_function(PyObject* capsule, PyObject* args, PyObject* kwargs) {
  const auto* f = static_cast<const Function*>(PyCapsule_GetPointer(capsule, kCapsule));
  if (!f) return nullptr;
  try {
    return f->invoke(f->sig, f->sig.bind(args, kwargs)).release();
  } catch (...) {
    return raise_current_exception();
  }
}

void free_function(PyObject* capsule) { delete static_cast<Function*>(PyCapsule_GetPointer(capsule, kCapsule)); }

}  // namespace

void add_function(PyObject* module, Signature sig, Invoke invoke, const char* doc) {
  auto* f = new Function{std::move(sig), std::move(invoke), {}};
  // A METH_KEYWORDS function is called with (self, args, kwargs) through PyCFunction's type.
  const auto call = reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(call_function));
  f->def = PyMethodDef{f->sig.function.c_str(), call, METH_VARARGS | METH_KEYWORDS, doc};
  Ref capsule(PyCapsule_New(f, kCapsule, free_function));
  if (!capsule) {
    delete f;
    throw PythonError{};
  }
  Ref module_name = check(PyObject_GetAttrString(module, "__name__"));
  Ref fn = check(PyCFunction_NewEx(&f->def, capsule.get(), module_name.get()));
  if (PyModule_AddObjectRef(module, f->sig.function.c_str(), fn.get()) < 0) throw PythonError{};
}

PyObject* add_submodule(PyObject* parent, const char* name, const char* doc) {
  Ref parent_name = check(PyObject_GetAttrString(parent, "__name__"));
  const std::string full = from_py<std::string>(parent_name.get(), {"add_submodule", "name"}) + "." + name;
  Ref m = check(PyModule_New(full.c_str()));
  if (doc && PyObject_SetAttrString(m.get(), "__doc__", to_py(doc).get()) < 0) throw PythonError{};
  if (PyModule_AddObjectRef(parent, name, m.get()) < 0) throw PythonError{};
  return m.get();  // the parent holds it
}

}  // namespace chiplet_fa::py
