"""Build chiplet_fa._C with CMake + ninja: one _C.abi3.so on torch's stable C ABI (torch 2.11 and
later) and CPython's limited API (3.10 and later).

Backend: CHIPLET_FA_BUILD=cpu|cuda|hip, else hip for a ROCm torch, cuda for a CUDA torch when
nvcc is found, cpu otherwise. GPU architectures: CHIPLET_FA_CUDA_ARCHS / PYTORCH_ROCM_ARCH when
given, else those of the GPUs visible now, else the wheel set (CMakeLists.txt's defaults).
Install with `pip install --no-build-isolation .`: the build takes torch's headers and libtorch_cpu
from the torch installed (CHIPLET_FA_TORCH_DIR: another torch package folder, e.g. a CPU torch's
for a ROCm wheel; with CHIPLET_FA_BUILD and the architectures given, no torch need be importable).
The version's local label says what the build holds: +cpu, +cu<CUDA major>, +rocm.<gfx targets>.
CHIPLET_FA_BUILD_DIR: the CMake build folder to use (default: one under pip's temporary build tree),
kept afterwards so that another target can be added to the same build without compiling the
kernels again (.ci/hip_build.sh adds tools/hip_launch_check).
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
VERSION = {}
exec((ROOT / "chiplet_fa" / "version.py").read_text(), VERSION)
# numpy: chiplet_fa imports none, but torch warns "Failed to initialize NumPy" on import without it,
# so every chiplet-fa command would print that warning.
INSTALL_REQUIRES = ["torch>=2.11", "numpy"]  # the stable ABI the build targets (CMakeLists.txt)
# transformers: the attention backend (chiplet_fa.integrations.transformers), the range CI tests at
# both ends, 5.17.0 and 5.25.0 (.ci/cpu_tests.sh); a later release joins it once tested.
EXTRAS_REQUIRE = {"plot": ["matplotlib"], "test": ["pytest", "hypothesis"],
                  "transformers": ["transformers>=5.17,<5.26"]}


def installed_torch():
    """torch where it imports, else None (a build given CHIPLET_FA_BUILD and its architectures)."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def pick_backend(torch):
    forced = os.environ.get("CHIPLET_FA_BUILD", "").strip().lower()
    if forced:
        if forced not in ("cpu", "cuda", "hip"):
            raise SystemExit(f"CHIPLET_FA_BUILD must be cpu, cuda or hip, got {forced!r}")
        return forced
    if torch is None:
        raise SystemExit("chiplet_fa: torch is not installed; install it first (pip install torch) or set CHIPLET_FA_BUILD")
    if torch.version.hip:
        return "hip"
    if torch.version.cuda and (shutil.which("nvcc") or os.environ.get("CUDA_HOME")):
        return "cuda"
    return "cpu"


def cuda_arch(major, minor):
    """The architecture to build for a compute capability: 9.0 takes the sm_90a kernels."""
    return "90a" if (major, minor) == (9, 0) else f"{major}{minor}"


def visible_gpu_archs(torch, backend):
    """Architectures of the GPUs this build machine sees, in order, without repeats."""
    if backend not in ("cuda", "hip") or torch is None or not torch.cuda.is_available():
        return []
    archs = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        arch = (props.gcnArchName.split(":")[0] if backend == "hip"
                else cuda_arch(props.major, props.minor))
        if arch not in archs:
            archs.append(arch)
    return archs


def gpu_arch_args(torch, backend, env=os.environ):
    """CMake arguments naming the GPU architectures: the user's, else the visible GPUs' (none:
    CMakeLists.txt's defaults, the wheel set)."""
    var = {"cuda": "CHIPLET_FA_CUDA_ARCHS", "hip": "PYTORCH_ROCM_ARCH"}.get(backend)
    if var is None:
        return []
    given = env.get(var, "").replace(",", ";").replace(" ", ";").strip(";")
    archs = given.split(";") if given else visible_gpu_archs(torch, backend)
    if not archs:
        return []
    cmake_var = "CHIPLET_FA_CUDA_ARCHS" if backend == "cuda" else "CHIPLET_FA_HIP_ARCHS"
    return [f"-D{cmake_var}=" + ";".join(a for a in archs if a)]


def cuda_major():
    """The CUDA major version of the nvcc the build uses (CMake finds it as this does)."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    nvcc = shutil.which("nvcc") or (home and str(Path(home) / "bin" / "nvcc"))
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout if nvcc else ""
    match = re.search(r"release (\d+)\.", out)
    return match.group(1) if match else "unknown"


def local_label(backend, env=os.environ):
    """The version's local label: what the wheel holds. A HIP build names its targets when they are
    given (CI's wheel); otherwise CMake picks them and the label says rocm alone."""
    if backend == "cuda":
        return f"cu{cuda_major()}"
    if backend == "hip":
        archs = [a for a in env.get("PYTORCH_ROCM_ARCH", "").replace(",", ";").replace(" ", ";").split(";") if a]
        return ".".join(["rocm", *archs])
    return "cpu"


BACKEND = None  # picked once in __main__: the version's label and the build must agree


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        torch = installed_torch()
        backend = BACKEND or pick_backend(torch)
        out_dir = Path(self.get_ext_fullpath(ext.name)).resolve().parent
        emulate = os.environ.get("CHIPLET_FA_EMULATE", "").strip()
        # An emulated build (clang, more units) keeps its own CMake cache, and a plain one resets
        # the variable, so neither inherits the other's.
        build_dir = (Path(os.environ["CHIPLET_FA_BUILD_DIR"]).resolve() if os.environ.get("CHIPLET_FA_BUILD_DIR") else
                     Path(self.build_temp).resolve() / (backend + (f"-emulate-{emulate}" if emulate else "")))
        build_dir.mkdir(parents=True, exist_ok=True)
        options = ([f"-DCHIPLET_FA_BACKEND={backend}", f"-DCHIPLET_FA_EMULATE={emulate}"] +
                   gpu_arch_args(torch, backend))
        # Unset, a reduced set is dropped from the cache: a rebuild after a reduced one builds all.
        for var in ("CHIPLET_FA_DTYPES", "CHIPLET_FA_HDIMS"):
            if os.environ.get(var):
                options.append(f"-D{var}=" + os.environ[var].replace(",", ";"))
            else:
                options.append(f"-U{var}")
        trace = os.environ.get("CHIPLET_FA_TRACE", "0").strip() or "0"
        if trace not in ("0", "1"):
            raise ValueError(f"CHIPLET_FA_TRACE must be 0 or 1 (a diagnostic build), got {trace!r}")
        options.append("-DCHIPLET_FA_TRACE=" + ("ON" if trace == "1" else "OFF"))
        # Another torch package's headers and libtorch_cpu; "" for the runtime: the compiler's own
        # shared libstdc++ (where no torch can be imported to ask which one it loads).
        for var in ("CHIPLET_FA_TORCH_DIR", "CHIPLET_FA_CXX_RUNTIME"):
            if var in os.environ:
                options.append(f"-D{var}={os.environ[var]}")
        print(f"chiplet_fa: building in {build_dir} with {' '.join(options)}", flush=True)
        subprocess.check_call([
            "cmake", "-S", str(ROOT), "-B", str(build_dir), "-G", "Ninja",
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={build_dir / 'lib'}",
        ] + options)
        jobs = os.environ.get("MAX_JOBS", str(os.cpu_count() or 2))
        subprocess.check_call(["cmake", "--build", str(build_dir), "-j", jobs])
        # Copied out rather than linked into out_dir: builds in different folders share out_dir,
        # and ninja would take another build's newer library there for its own, up to date.
        target = Path(self.get_ext_fullpath(ext.name))
        out_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy2(build_dir / "lib" / target.name, target)


if __name__ == "__main__":
    BACKEND = pick_backend(installed_torch())
    setup(
        name="chiplet_fa",
        version=f"{VERSION['__version__']}+{local_label(BACKEND)}",
        description="FlashAttention-2 kernels with L2-domain-aware (chiplet) workgroup mapping",
        packages=find_packages(include=["chiplet_fa", "chiplet_fa.*"]),
        # py_limited_api: the module is built as _C.abi3.so (CMakeLists.txt), the name looked up here.
        ext_modules=[Extension("chiplet_fa._C", sources=[], py_limited_api=True)],
        cmdclass={"build_ext": CMakeBuild},
        options={"bdist_wheel": {"py_limited_api": "cp310"}},  # the wheel's tag: cp310-abi3
        python_requires=">=3.10",
        install_requires=INSTALL_REQUIRES,
        extras_require=EXTRAS_REQUIRE,
        entry_points={"console_scripts": ["chiplet-fa=chiplet_fa.__main__:main"]},
    )
