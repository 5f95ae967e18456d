"""Build chiplet_fa._C with CMake + ninja for whichever torch is installed.

Backend: CHIPLET_FA_BUILD=cpu|cuda|hip, else hip for a ROCm torch, cuda for a CUDA torch when
nvcc is found, cpu otherwise. Install with `pip install --no-build-isolation .` so the build
sees the torch you run with (an isolated build would fetch another one).
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def pick_backend(torch):
    forced = os.environ.get("CHIPLET_FA_BUILD", "").strip().lower()
    if forced:
        if forced not in ("cpu", "cuda", "hip"):
            raise SystemExit(f"CHIPLET_FA_BUILD must be cpu, cuda or hip, got {forced!r}")
        return forced
    if torch.version.hip:
        return "hip"
    if torch.version.cuda and (shutil.which("nvcc") or os.environ.get("CUDA_HOME")):
        return "cuda"
    return "cpu"


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        import torch

        backend = pick_backend(torch)
        out_dir = Path(self.get_ext_fullpath(ext.name)).resolve().parent
        build_dir = Path(self.build_temp).resolve() / backend
        build_dir.mkdir(parents=True, exist_ok=True)
        args = [
            "cmake", "-S", str(ROOT), "-B", str(build_dir), "-G", "Ninja",
            f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}",
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={out_dir}",
            f"-DCHIPLET_FA_BACKEND={backend}",
        ]
        for env, var in (("CHIPLET_FA_DTYPES", "CHIPLET_FA_DTYPES"),
                         ("CHIPLET_FA_HDIMS", "CHIPLET_FA_HDIMS"),
                         ("CHIPLET_FA_CUDA_ARCHS", "CMAKE_CUDA_ARCHITECTURES")):
            if os.environ.get(env):
                args.append(f"-D{var}=" + os.environ[env].replace(",", ";"))
        print(f"chiplet_fa: building the {backend} backend in {build_dir}", flush=True)
        subprocess.check_call(args)
        jobs = os.environ.get("MAX_JOBS", str(os.cpu_count() or 2))
        subprocess.check_call(["cmake", "--build", str(build_dir), "-j", jobs])


setup(
    name="chiplet_fa",
    version="0.1.0",
    description="FlashAttention-2 kernels with L2-domain-aware (chiplet) workgroup mapping",
    packages=find_packages(include=["chiplet_fa", "chiplet_fa.*"]),
    ext_modules=[Extension("chiplet_fa._C", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.10",
    install_requires=["torch>=2.5"],
    extras_require={"plot": ["matplotlib"], "test": ["pytest", "hypothesis"]},
    entry_points={"console_scripts": ["chiplet-fa=chiplet_fa.__main__:main"]},
)
