// The CPU backend's kernels for every operator.
#include <torch/library.h>

#include "cpu/cpu_backend.h"

TORCH_LIBRARY_IMPL(chiplet_fa, CPU, m) { chiplet_fa::OpEntry<chiplet_fa::fwd_cpu, chiplet_fa::bwd_cpu>::register_ops(m); }
