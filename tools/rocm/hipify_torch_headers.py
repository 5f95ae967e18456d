#!/usr/bin/env python3
"""Make the closest thing to a ROCm torch's headers that a machine without one can: run torch's
own hipify over an installed (CUDA or CPU) torch's include/ tree, the way PyTorch's ROCm build
does over its sources (tools/amd_build/build_amd.py: c10/cuda -> c10/hip, ATen/cuda -> ATen/hip,
torch/ in place; ATen/core and hip/ folders left alone), so that the torch-facing HIP bindings
can be compiled against c10/hip/HIPStream.h and friends.

Only torch's hipify touches the files; nothing is written by hand. What this cannot make (the
headers a ROCm build configures with CMake, such as ATen/hip/HIPConfig.h, and the ROCm-only
sources) is listed in docs/families.md under the HIP build, and printed here when absent.

    python tools/rocm/hipify_torch_headers.py TORCH_PACKAGE_DIR OUT_DIR

TORCH_PACKAGE_DIR is an installed torch package (it holds include/ and utils/hipify/); torch
itself is not imported. OUT_DIR/include receives the tree (pass it to CMake as
CHIPLET_FA_TORCH_INCLUDE).
"""
import argparse
import contextlib
import io
import shutil
import sys
from pathlib import Path

# build_amd.py's include and ignore patterns, spelled for the installed tree (aten/src/ATen -> ATen).
INCLUDES = ["c10/cuda/*", "ATen/cuda/*", "ATen/native/cuda/*", "ATen/native/cudnn/*",
            "ATen/native/nested/cuda/*", "ATen/native/sparse/cuda/*", "ATen/native/quantized/cuda/*",
            "ATen/native/quantized/cudnn/*", "ATen/native/transformers/cuda/*", "torch/*"]
IGNORES = ["*/hip/*", "ATen/core/*", "ATen/cuda/CUDAConfig.h"]
# What the bindings include from a ROCm torch, and what only a ROCm build's CMake configures.
NEEDED = ["c10/hip/HIPStream.h", "c10/hip/HIPFunctions.h", "c10/hip/impl/hip_cmake_macros.h"]
CONFIGURED_BY_ROCM_BUILD = ["ATen/hip/HIPConfig.h"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("torch_dir", type=Path, help="an installed torch package (holds include/, utils/hipify/)")
    parser.add_argument("out_dir", type=Path)
    args = parser.parse_args(argv)
    source = args.torch_dir / "include"
    if not (source / "c10" / "cuda").is_dir() or not (args.torch_dir / "utils" / "hipify").is_dir():
        print(f"hipify_torch_headers: {args.torch_dir} is not a torch package with include/c10/cuda and "
              "utils/hipify", file=sys.stderr)
        return 1
    sys.path.insert(0, str(args.torch_dir / "utils"))
    import hipify  # torch's hipify, without importing torch
    from hipify import hipify_python

    out = (args.out_dir / "include").resolve()
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(source, out)
    with contextlib.redirect_stderr(io.StringIO()):  # its colour banner
        results = hipify_python.hipify(
            project_directory=str(out), output_directory=str(out),
            includes=[str(out / p) for p in INCLUDES], ignores=[str(out / p) for p in IGNORES],
            show_progress=False, hip_clang_launch=True)
    written = sum(1 for r in results.values() if r.hipified_path and r.status == "[ok]")
    print(f"hipify_torch_headers: hipify {hipify.__version__} of torch {read_version(args.torch_dir)} "
          f"wrote {written} files into {out}")
    missing = [h for h in NEEDED if not (out / h).is_file()]
    if missing:
        print(f"hipify_torch_headers: hipify produced no {', '.join(missing)}", file=sys.stderr)
        return 1
    for header in CONFIGURED_BY_ROCM_BUILD:
        if not (out / header).is_file():
            print(f"hipify_torch_headers: not made (a ROCm build configures it with CMake): {header}")
    return 0


def read_version(torch_dir):
    try:
        return (torch_dir / "version.py").read_text().split("__version__ = ")[1].split("\n")[0].strip("'\"")
    except (OSError, IndexError):
        return "(version unknown)"


if __name__ == "__main__":
    sys.exit(main())
