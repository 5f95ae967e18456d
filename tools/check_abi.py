#!/usr/bin/env python3
"""What a built chiplet_fa._C links against, and the check that it is only torch's C shim.

  python tools/check_abi.py PATH [--list]      PATH: a _C*.so, or a wheel (its _C is read from it)

Passes when the library
  * is named as an abi3 extension (_C.abi3.so: CPython's limited API, one file for every Python);
  * needs (DT_NEEDED) no library but libtorch_cpu.so (torch's C shim), the C and C++ runtimes and,
    in a ROCm build, libamdhip64 (a CUDA build carries its runtime statically);
  * imports no C++ symbol of libtorch (c10::, at::, torch::) or pybind11, and of CPython's private
    names only those the stable ABI has (_Py_Dealloc, _Py_NoneStruct, ...).
It prints the undefined symbols by family (and with --list every one) and the newest glibc and
libstdc++ symbol versions they need (the oldest system the library loads on), for a CI log. Exit
status 1 names what broke the rule. Uses nm, readelf and c++filt from binutils.
"""
import argparse
import re
import subprocess
import sys
import tempfile
import zipfile
from collections import Counter
from pathlib import Path

ALLOWED_NEEDED = re.compile(r"^(libtorch_cpu\.so|libstdc\+\+\.so\.6|libm\.so\.6|libgcc_s\.so\.1|libc\.so\.6|"
                            r"libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|ld-linux-x86-64\.so\.2|"
                            r"libamdhip64\.so(\.\d+)*)$")
FORBIDDEN_CPP = re.compile(r"^(?:(?:vtable|typeinfo|typeinfo name|VTT|construction vtable) for )?"
                           r"(?:c10|at|torch|pybind11)::")
# CPython's underscored names that belong to the stable ABI (reference counting and singletons).
STABLE_PRIVATE = {"_Py_Dealloc", "_Py_NoneStruct", "_Py_TrueStruct", "_Py_FalseStruct", "_Py_IncRef", "_Py_DecRef",
                  "_Py_NotImplementedStruct", "_Py_EllipsisObject"}
FAMILIES = [("torch C shim", re.compile(r"^(aoti_torch_|torch_)")), ("CPython", re.compile(r"^_?Py")),
            ("HIP runtime", re.compile(r"^(hip|__hip)")), ("C/C++ runtime", re.compile(r"."))]


def run(*cmd, stdin=None):
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, check=True).stdout


def undefined_symbols(so):
    names = {line.split()[-1] for line in run("nm", "-D", "--undefined-only", str(so)).splitlines() if line.strip()}
    raw = sorted(n.split("@")[0] for n in names if not n.startswith(("__gmon_start__", "_ITM_")))
    return list(zip(raw, run("c++filt", stdin="\n".join(raw)).splitlines()))


def needed(so):
    return re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", run("readelf", "-d", str(so)))


def newest_versions(so):
    """The newest version of each runtime's symbol versions (GLIBC_2.34, GLIBCXX_3.4.30, ...) the library needs."""
    newest = {}
    for name, version in re.findall(r"Name: (GLIBC|GLIBCXX|CXXABI)_([\d.]+)", run("readelf", "-V", str(so))):
        key = tuple(int(part) for part in version.split("."))
        if key > newest.get(name, ()):
            newest[name] = key
    return {name: ".".join(map(str, key)) for name, key in newest.items()}


def problems(so):
    found = []
    if not so.name.endswith(".abi3.so"):
        found.append(f"{so.name} is not an abi3 extension (expected _C.abi3.so)")
    found += [f"needs {lib}" for lib in needed(so) if not ALLOWED_NEEDED.match(lib)]
    for raw, name in undefined_symbols(so):
        if FORBIDDEN_CPP.match(name):
            found.append(f"imports {name}")
        elif raw.startswith("_Py") and raw not in STABLE_PRIVATE:
            found.append(f"imports CPython's private {raw}")
    return found


def report(so, listing=False):
    symbols = undefined_symbols(so)
    counts = Counter(next(family for family, rx in FAMILIES if rx.match(raw)) for raw, _ in symbols)
    print(f"{so.name}: needs {', '.join(needed(so))}")
    print("undefined symbols: " + ", ".join(f"{n} {family}" for family, n in counts.most_common()))
    print("newest symbol versions: " + ", ".join(f"{name}_{v}" for name, v in sorted(newest_versions(so).items())))
    if listing:
        for raw, name in symbols:
            print(f"  {name}")


def extension_of(path, scratch):
    if path.suffix != ".whl":
        return path
    with zipfile.ZipFile(path) as wheel:
        member = next(n for n in wheel.namelist() if re.fullmatch(r"chiplet_fa/_C[^/]*\.so", n))
        return Path(wheel.extract(member, scratch))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", type=Path, help="a _C*.so or a chiplet_fa wheel")
    ap.add_argument("--list", action="store_true", help="print every undefined symbol")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        so = extension_of(args.path, scratch)
        report(so, args.list)
        found = problems(so)
    for line in found:
        print(f"check_abi: {line}", file=sys.stderr)
    print("check_abi: " + ("FAILED" if found else "only torch's C shim, CPython's stable ABI and the runtimes"))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
