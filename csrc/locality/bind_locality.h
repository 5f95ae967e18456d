// pybind11 bindings of the L2 locality model and XCD detection (chiplet_fa._C).
#pragma once
#include <pybind11/pybind11.h>

namespace chiplet_fa::locality {

void bind_locality(pybind11::module_& m);

}  // namespace chiplet_fa::locality
