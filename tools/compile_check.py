#!/usr/bin/env python3
"""Compile every generated GPU translation unit for the targets of its kernel family, without a GPU.

A unit names its family (`#define CFA_FAMILY_MMA_SYNC|SM90|CDNA3`, kernels/instantiations/<family>/):
  - mma_sync units are compiled by nvcc for each --cuda-arch (default sm_80, sm_90),
  - sm90 units by nvcc for sm_90a (wgmma, the warp-specialised kernels),
  - cdna3 units by clang as HIP for gfx942 (MI300X), device code only, to assembly, which llvm-mc
    assembles into an object that llvm-objdump disassembles; the v_mfma (matrix-core)
    instructions are counted, since a kernel that compiled to none of them would run at a
    fraction of peak, and the register use the compiler reports in the assembly (arch VGPRs,
    AGPRs, scratch bytes per lane: a nonzero scratch size means spills to memory) is shown.
The HIP step stops before linking: with -nogpulib the device libraries (ockl/ocml: thread ids,
math) are absent, and their symbols stay undefined, as they do in any object before the link.

The GPU bindings (csrc/ops/gpu/*.cu) name no family: they hold host code against torch's stable ABI,
compiled by nvcc for each --cuda-arch and by clang as HIP (host side) for gfx942, with the installed
torch's headers (--torch-include), TORCH_TARGET_VERSION 2.11 as the build sets it, and a
build_config.h of a build for those targets. torch's headeronly complex.h includes
<thrust/complex.h> under HIP; where the HIP headers lack rocThrust (the bindings use no complex
numbers) a two-function stand-in is put on the include path.

Prints one row per unit ("-" where its family has no such target) and exits non-zero when no
unit is found, a unit names no family, any compile fails, or a cdna3 unit's code has no v_mfma.
Run from the repository root: python tools/compile_check.py
"""
import argparse
import glob
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Resource summary comments clang writes after each kernel in the assembly.
RESOURCES = {"vgpr": "NumVgprs", "agpr": "NumAgprs", "scratch": "ScratchSize"}
# The HIP build's floating-point flags (CMakeLists.txt, CFA_CDNA3_MATH_FLAGS), so the check sees the
# code the build makes.
HIP_MATH_FLAGS = ["-ffast-math", "-fno-finite-math-only"]
FAMILY = re.compile(r"^#define CFA_FAMILY_(MMA_SYNC|SM90|CDNA3)\b", re.MULTILINE)


BINDINGS = ROOT / "csrc" / "ops" / "gpu"
TORCH_TARGET = "-DTORCH_TARGET_VERSION=0x020b000000000000"
THRUST_STANDIN = """#pragma once
namespace thrust {
template <typename T> struct complex {
  __host__ __device__ complex(T re = T(), T im = T()) : re_(re), im_(im) {}
  __host__ __device__ T real() const { return re_; }
  __host__ __device__ T imag() const { return im_; }
  T re_, im_;
};
template <typename T> __host__ __device__ complex<T> polar(const T& r, const T& theta = T()) { return {r, theta}; }
}  // namespace thrust
"""


def family_of(tu):
    """The kernel family a unit defines, lower-case, "binding" for a GPU binding, or None."""
    if tu.resolve().parent == BINDINGS:
        return "binding"
    match = FAMILY.search(tu.read_text())
    return match.group(1).lower() if match else None


def targets(family, args):
    """The columns a family's units are compiled for."""
    return {"mma_sync": args.cuda_arch, "sm90": ["sm_90a"], "cdna3": [args.hip_arch],
            "binding": [*args.cuda_arch, args.hip_arch]}[family]


def build_config(out_dir, platform, args):
    """A folder with the build_config.h of a CUDA or HIP build for the checked targets."""
    folder = out_dir / f"config_{platform}"
    folder.mkdir(exist_ok=True)
    sass = [a.removeprefix("sm_").rstrip("af") for a in args.cuda_arch]
    values = {"CHIPLET_FA_BACKEND": platform, "CFA_GPU": "1", "CFA_MMA_SYNC_SASS": ",".join(sass),
              "CFA_MMA_SYNC_PTX": sass[-1], "CFA_HAS_SM90": "0",
              "CFA_GPU_ARCHS": args.hip_arch if platform == "hip" else ";".join(sass)}
    text = (ROOT / "csrc" / "ops" / "build_config.h.in").read_text()
    (folder / "build_config.h").write_text(re.sub(r"@(\w+)@", lambda m: values.get(m.group(1), ""), text))
    if platform == "hip" and not args.has_rocthrust:
        (folder / "thrust").mkdir(exist_ok=True)
        (folder / "thrust" / "complex.h").write_text(THRUST_STANDIN)
    return ["-I", str(folder), "-isystem", str(args.torch_include), TORCH_TARGET]


def binding_step(tu, column, out_dir, args):
    """(ok, log) of a binding unit's host code for one column."""
    obj = out_dir / f"{tu.stem}.{column}.o"
    if column == args.hip_arch:
        return run([args.clang, "-x", "hip", f"--offload-arch={column}", "-nogpulib", "--cuda-host-only", "-O3",
                    *HIP_MATH_FLAGS, "-std=c++20", "-DUSE_ROCM=1", *build_config(out_dir, "hip", args),
                    *defines(args), "-I", str(args.include), "-c", str(tu), "-o", str(obj)])
    return run([args.nvcc, "-std=c++20", "-O3", "--expt-relaxed-constexpr", f"-arch={column}",
                *build_config(out_dir, "cuda", args), *defines(args), "-I", str(args.include), "-c", str(tu),
                "-o", str(obj)])


def resources(asm_text):
    """{vgpr, agpr, scratch}: the largest value over the kernels of an assembly file."""
    found = {}
    for key, name in RESOURCES.items():
        values = [int(v) for v in re.findall(rf"^\s*; {name}: (\d+)", asm_text, re.MULTILINE)]
        found[key] = max(values) if values else None
    return found


def run(cmd):
    """(ok, output) of a command; output is stderr+stdout, for the failure report."""
    done = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    return done.returncode == 0, done.stderr + done.stdout


def nvcc_step(tu, arch, out_dir, args):
    obj = out_dir / f"{tu.stem}.{arch}.o"
    target = ["-gencode=arch=compute_90a,code=sm_90a"] if arch == "sm_90a" else [f"-arch={arch}"]
    return run([args.nvcc, "-std=c++20", "-O3", "--expt-relaxed-constexpr", *target, *defines(args),
                "-I", str(args.include), "-c", str(tu), "-o", str(obj)])


def defines(args):
    return [f"-D{d}" for d in args.define or []]


def hip_step(tu, out_dir, args):
    """(ok, log, number of v_mfma instructions, resources) for gfx942."""
    asm, obj = out_dir / f"{tu.stem}.{args.hip_arch}.s", out_dir / f"{tu.stem}.{args.hip_arch}.o"
    steps = [
        [args.clang, "-x", "hip", f"--offload-arch={args.hip_arch}", "-nogpulib", "--cuda-device-only",
         "-O3", *HIP_MATH_FLAGS, "-std=c++20", *defines(args), "-I", str(args.include), "-S", str(tu), "-o", str(asm)],
        [args.llvm_mc, "--triple=amdgcn-amd-amdhsa", f"--mcpu={args.hip_arch}", "-filetype=obj",
         str(asm), "-o", str(obj)],
    ]
    for cmd in steps:
        ok, log = run(cmd)
        if not ok:
            return False, log, 0, {}
    ok, listing = run([args.objdump, "-d", str(obj)])
    if not ok:
        return False, listing, 0, {}
    mfma = sum(1 for line in listing.splitlines() if "v_mfma" in line)
    return True, "", mfma, resources(asm.read_text())


def check(tu, out_dir, args):
    """One TU through its family's compilers: {column: (status, log)}, the v_mfma count (None
    for NVIDIA families) and the HIP resources; status is "ok" or "FAILED"."""
    family = family_of(tu)
    if family is None:
        return {}, None, {}
    if family == "binding":
        results = {column: binding_step(tu, column, out_dir, args) for column in targets(family, args)}
        return {column: ("ok" if ok else "FAILED", log) for column, (ok, log) in results.items()}, None, {}
    if family != "cdna3":
        results = {arch: nvcc_step(tu, arch, out_dir, args) for arch in targets(family, args)}
        return {arch: ("ok" if ok else "FAILED", log) for arch, (ok, log) in results.items()}, None, {}
    ok, log, mfma, used = hip_step(tu, out_dir, args)
    return {args.hip_arch: ("ok" if ok else "FAILED", log)}, mfma, used


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("sources", nargs="*", default=[str(ROOT / "csrc/kernels/instantiations/*/*.cu")],
                   help="TU files or globs (default: csrc/kernels/instantiations/*/*.cu)")
    p.add_argument("--include", type=Path, default=ROOT / "csrc")
    p.add_argument("--cuda-arch", action="append", help="nvcc -arch of mma_sync units (repeatable; default sm_80, sm_90)")
    p.add_argument("--hip-arch", default="gfx942")
    p.add_argument("--define", action="append", help="a macro for every compile, e.g. CFA_TRACE=1 (repeatable)")
    p.add_argument("--nvcc", default=os.environ.get("NVCC", "nvcc"))
    p.add_argument("--clang", default="clang-19")
    p.add_argument("--llvm-mc", default="llvm-mc-19")
    p.add_argument("--objdump", default="llvm-objdump-19")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    p.add_argument("--keep", type=Path, help="keep objects and assembly in this folder")
    p.add_argument("--torch-include", type=Path, help="torch's headers, for the bindings (default: the installed torch's)")
    args = p.parse_args(argv)
    args.cuda_arch = args.cuda_arch or ["sm_80", "sm_90"]
    if args.torch_include is None:
        spec = importlib.util.find_spec("torch")
        args.torch_include = Path(spec.origin).parent / "include" if spec else Path("/nonexistent")
    args.has_rocthrust = bool(shutil.which(args.clang)) and subprocess.run(
        [args.clang, "-x", "hip", "-nogpulib", "--cuda-host-only", "-E", "-"], input="#include <thrust/complex.h>\n",
        capture_output=True, text=True).returncode == 0
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    tus = sorted({Path(f) for pattern in args.sources for f in glob.glob(pattern)})
    if not tus:
        print(f"compile_check: no translation unit matches {' '.join(args.sources)}", file=sys.stderr)
        return 1
    missing = [t for t in (args.nvcc, args.clang, args.llvm_mc, args.objdump) if not shutil.which(t)]
    if missing:
        print(f"compile_check: tools not found: {', '.join(missing)}", file=sys.stderr)
        return 1

    with tempfile.TemporaryDirectory() as tmp:
        out_dir = args.keep or Path(tmp)
        out_dir.mkdir(parents=True, exist_ok=True)
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            results = list(pool.map(lambda tu: check(tu, out_dir, args), tus))

    columns = args.cuda_arch + ["sm_90a", args.hip_arch]
    width = max(len(t.parent.name) + 1 + len(t.name) for t in tus)
    print(f"{'translation unit':{width}s}  " + "  ".join(f"{c:>7s}" for c in columns) +
          "".join(f"  {k:>6s}" for k in ["v_mfma", *RESOURCES]))
    failures = []
    for tu, (by_column, mfma, used) in zip(tus, results):
        name = f"{tu.parent.name}/{tu.name}"
        if not by_column:
            failures.append(f"--- {name}: names no kernel family (#define CFA_FAMILY_MMA_SYNC, SM90 or CDNA3)")
        for column, (status, log) in by_column.items():
            if status == "FAILED":
                failures.append(f"--- {name} [{column}]\n{log.strip()[-4000:]}")
        if by_column.get(args.hip_arch, ("",))[0] == "ok" and mfma == 0:
            failures.append(f"--- {name} [{args.hip_arch}]: no v_mfma instruction in the disassembly")
        numbers = [mfma] + [used.get(k) for k in RESOURCES]
        print(f"{name:{width}s}  " + "  ".join(f"{by_column.get(c, ('-',))[0]:>7s}" for c in columns) +
              "".join(f"  {'-' if n is None else n:>6}" for n in numbers))
    for failure in failures:
        print(failure, file=sys.stderr)
    print(f"compile_check: {len(tus)} translation units, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
