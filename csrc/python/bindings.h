// The submodules of chiplet_fa._C, each added to the module by its init.
#pragma once
#include <Python.h>

namespace chiplet_fa {

namespace locality {
// chiplet_fa._C.locality: the L2 locality model and XCD detection (python/locality.cpp).
void add_locality(PyObject* module);
}  // namespace locality

// chiplet_fa._C.emulate, in an emulated build: the emulated CDNA3 backend (python/emulate.cpp).
void add_emulate(PyObject* module);

}  // namespace chiplet_fa
