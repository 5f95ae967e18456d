// pybind11 bindings of the emulated CDNA3 backend (chiplet_fa._C.emulate, emulated builds only):
// the trace session, the kernels' forward tile, and the emulator's self-test kernels.
#pragma once
#include <pybind11/pybind11.h>

namespace chiplet_fa {

void bind_emulate(pybind11::module_& m);

}  // namespace chiplet_fa
