"""L2 domain (XCD) count of a device: the op's rule (csrc/mapping/topology.cpp), exposed for tools
and tests."""
from typing import NamedTuple, Optional

import torch

from .. import _C

_L = _C.locality
KFD_TOPOLOGY_ROOT = "/sys/class/kfd/kfd/topology"


class XcdDetection(NamedTuple):
    num_xcds: int
    source: str    # which rule answered
    assumed: bool  # no rule applied: 1 is an assumption (the op warns)


def detect_xcds_rocm(kfd_root: str = KFD_TOPOLOGY_ROOT, device_index: int = 0,
                     env_override: Optional[str] = None, visible_devices: Optional[str] = None,
                     cu_count: int = 0, arch: str = "") -> XcdDetection:
    """The ROCm rule with every input explicit, for fake sysfs trees and device properties
    (cu_count and arch, e.g. torch's multi_processor_count and gcnArchName)."""
    return XcdDetection(*_L.detect_xcds_rocm(kfd_root, device_index, env_override,
                                             visible_devices, cu_count, arch))


def detect_xcds(device=None) -> XcdDetection:
    """The XCD count the op uses for `device` (CHIPLET_FA_NUM_XCDS overrides on GPUs)."""
    device = torch.device(device if device is not None else "cpu")
    return XcdDetection(*_L.detect_xcds(str(device)))
