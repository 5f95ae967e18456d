#!/usr/bin/env python3
"""Compile every framework-free GPU translation unit for NVIDIA and AMD without a GPU.

Each TU (default: csrc/instantiations/*.cu) is compiled
  - by nvcc for each --cuda-arch (default sm_80, sm_90, and sm_90a, which builds the wgmma
    path: CFA_WGMMA, as CMake sets it for a Hopper-only build) to an object file, and
  - by clang as HIP for gfx942 (MI300X), device code only, to assembly, which llvm-mc assembles
    into an object that llvm-objdump disassembles; the v_mfma (matrix-core) instructions are
    counted, since a kernel that compiled to none of them would run at a fraction of peak, and
    the register use the compiler reports in the assembly (arch VGPRs, AGPRs, scratch bytes per
    lane: a nonzero scratch size means spills to memory) is shown.
TUs whose file name says a head dim above HIP_MAX_HEAD_DIM (..._hdim192_...) are skipped for
gfx942, with the reason: their tiles need more LDS than a workgroup has there.
The HIP step stops before linking: with -nogpulib the device libraries (ockl/ocml: thread ids,
math) are absent, and their symbols stay undefined, as they do in any object before the link.

Prints one row per TU and exits non-zero when no TU is found, any compile fails, or a compiled
TU's HIP code has no v_mfma. Run from the repository root: python tools/compile_check.py
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Largest head dim whose forward tiles fit gfx942's 64 KB of LDS per workgroup (the HIP build
# asserts this in fwd_launch_impl.h, and CMake's HIP default leaves larger ones out).
HIP_MAX_HEAD_DIM = 128
# Resource summary comments clang writes after each kernel in the assembly.
RESOURCES = {"vgpr": "NumVgprs", "agpr": "NumAgprs", "scratch": "ScratchSize"}


def hip_skip_reason(tu):
    """Why a TU is not compiled for the HIP arch, or None."""
    match = re.search(r"_hdim(\d+)_", tu.name)
    if match and int(match.group(1)) > HIP_MAX_HEAD_DIM:
        return (f"head dim {match.group(1)} > {HIP_MAX_HEAD_DIM}: its tiles need more than the "
                f"64 KB of LDS a gfx942 workgroup has")
    return None


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
    target = ["-gencode=arch=compute_90a,code=sm_90a", "-DCFA_WGMMA=1"] if arch == "sm_90a" else [f"-arch={arch}"]
    return run([args.nvcc, "-std=c++20", "-O3", "--expt-relaxed-constexpr", *target,
                "-I", str(args.include), "-c", str(tu), "-o", str(obj)])


def hip_step(tu, out_dir, args):
    """(ok, log, number of v_mfma instructions, resources) for gfx942."""
    asm, obj = out_dir / f"{tu.stem}.{args.hip_arch}.s", out_dir / f"{tu.stem}.{args.hip_arch}.o"
    steps = [
        [args.clang, "-x", "hip", f"--offload-arch={args.hip_arch}", "-nogpulib", "--cuda-device-only",
         "-O3", "-std=c++20", "-I", str(args.include), "-S", str(tu), "-o", str(asm)],
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
    """One TU through every compiler: {column: (status, log)}, the v_mfma count and the HIP
    resources; status is "ok", "FAILED" or "skipped" (log then says why)."""
    results = {arch: nvcc_step(tu, arch, out_dir, args) for arch in args.cuda_arch}
    results = {arch: ("ok" if ok else "FAILED", log) for arch, (ok, log) in results.items()}
    skip = hip_skip_reason(tu)
    if skip:
        results[args.hip_arch] = ("skipped", skip)
        return results, None, {}
    ok, log, mfma, used = hip_step(tu, out_dir, args)
    results[args.hip_arch] = ("ok" if ok else "FAILED", log)
    return results, mfma, used


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("sources", nargs="*", default=[str(ROOT / "csrc/instantiations/*.cu")],
                   help="TU files or globs (default: csrc/instantiations/*.cu)")
    p.add_argument("--include", type=Path, default=ROOT / "csrc")
    p.add_argument("--cuda-arch", action="append", help="nvcc -arch (repeatable; default sm_80, sm_90)")
    p.add_argument("--hip-arch", default="gfx942")
    p.add_argument("--nvcc", default=os.environ.get("NVCC", "nvcc"))
    p.add_argument("--clang", default="clang-19")
    p.add_argument("--llvm-mc", default="llvm-mc-19")
    p.add_argument("--objdump", default="llvm-objdump-19")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    p.add_argument("--keep", type=Path, help="keep objects and assembly in this folder")
    args = p.parse_args(argv)
    args.cuda_arch = args.cuda_arch or ["sm_80", "sm_90", "sm_90a"]
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

    columns = args.cuda_arch + [args.hip_arch]
    width = max(len(t.name) for t in tus)
    print(f"{'translation unit':{width}s}  " + "  ".join(f"{c:>7s}" for c in columns) +
          "".join(f"  {k:>6s}" for k in ["v_mfma", *RESOURCES]))
    failures, skipped = [], []
    for tu, (by_column, mfma, used) in zip(tus, results):
        for column in columns:
            status, log = by_column[column]
            if status == "FAILED":
                failures.append(f"--- {tu.name} [{column}]\n{log.strip()[-4000:]}")
            elif status == "skipped":
                skipped.append(f"--- {tu.name} [{column}] skipped: {log}")
        if by_column[args.hip_arch][0] == "ok" and mfma == 0:
            failures.append(f"--- {tu.name} [{args.hip_arch}]: no v_mfma instruction in the disassembly")
        numbers = [mfma] + [used.get(k) for k in RESOURCES]
        print(f"{tu.name:{width}s}  " + "  ".join(f"{by_column[c][0]:>7s}" for c in columns) +
              "".join(f"  {'-' if n is None else n:>6}" for n in numbers))
    for line in skipped:
        print(line)
    for failure in failures:
        print(failure, file=sys.stderr)
    print(f"compile_check: {len(tus)} translation units, {len(failures)} failures, "
          f"{len(skipped)} skipped")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
