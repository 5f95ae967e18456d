"""L2 locality model: predicted L2 hit rate and DRAM traffic of each workgroup mapping.

The model lives in C++ (csrc/locality); this package gives it Python types, the XCD detection
the op uses, the `auto` decision with explain(), and the `simulate` CLI subcommand.
"""
from .detect import XcdDetection, detect_xcds, detect_xcds_rocm
from .explain import explain
from .model import (Dispatch, Prediction, Shape, Topology, choose_mapping, estimate, preset,
                    presets, simulate, topology_for_domains)

__all__ = ["Dispatch", "Prediction", "Shape", "Topology", "XcdDetection", "choose_mapping",
           "detect_xcds", "detect_xcds_rocm", "estimate", "explain", "preset", "presets",
           "simulate", "topology_for_domains"]
