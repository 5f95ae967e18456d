"""What this installation was built with, and which kernels a device runs."""
from collections import defaultdict
from typing import Optional

import torch

from . import _C
from .version import __version__


def kernel_path(device=None) -> str:
    """The kernel family a call on `device` runs ("cpu", "sm90 on NVIDIA H200 (sm_90)", ...).

    device: default the current CUDA/ROCm device when one is visible, else the CPU. Raises
    RuntimeError when this build has no kernels that run on the device.
    """
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return _C.kernel_path(str(device))


def build_info(device: Optional[object] = None) -> dict:
    """The build's backend, GPU architectures, compiled kernel instantiations (per family and
    kind: dtypes and head dims), compilers, the torch it was built against, and the kernel path
    `device` (default: the current GPU, else the CPU) would run."""
    raw = _C.build_info()
    kernels = defaultdict(lambda: defaultdict(lambda: {"dtypes": set(), "head_dims": set()}))
    for unit in filter(None, raw["instantiations"].split(";")):
        family, kind, dtype, hdim = unit.split("/")
        kernels[family][kind]["dtypes"].add(dtype)
        kernels[family][kind]["head_dims"].add(int(hdim))
    try:
        path = kernel_path(device)
    except RuntimeError as err:
        path = f"none: {err}"
    return {
        "version": __version__,
        "backend": raw["backend"] + (f" (emulating {raw['emulate']})" if raw["emulate"] else ""),
        "archs": [a for a in raw["archs"].split(";") if a],
        "kernels": {family: {kind: {"dtypes": sorted(v["dtypes"]), "head_dims": sorted(v["head_dims"])}
                             for kind, v in kinds.items()} for family, kinds in kernels.items()},
        "cxx_compiler": raw["cxx_compiler"],
        "gpu_compiler": raw["gpu_compiler"] or None,
        "cxx_runtime": raw["cxx_runtime"] or None,
        "built_with_torch": raw["torch"],
        "running_torch": torch.__version__,
        "kernel_path": path,
        "trace": bool(raw.get("trace", False)),
    }


def format_build_info(info: dict) -> str:
    lines = [f"chiplet_fa {info['version']}"]
    for key in ("backend", "archs", "cxx_compiler", "gpu_compiler", "cxx_runtime", "built_with_torch",
                "running_torch", "kernel_path"):
        value = ", ".join(info[key]) if isinstance(info[key], list) else info[key]
        lines.append(f"  {key:17s} {value if value not in (None, '') else '-'}")
    if info.get("trace"):
        lines.append("  trace             ON: a diagnostic build, its sm90 kernels record timelines (tools/probes/trace.py)")
    for family, kinds in info["kernels"].items():
        for kind, v in kinds.items():
            lines.append(f"  kernels {family:9s} {kind}: {'/'.join(v['dtypes'])} head dims "
                         f"{', '.join(map(str, v['head_dims']))}")
    return "\n".join(lines)
