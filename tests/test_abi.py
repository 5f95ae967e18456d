"""What chiplet_fa._C links against: torch's C shim only, no libtorch C++ symbol.

Two checks of undefined symbols (nm --undefined-only, demangled with c++filt):

* the operator layer's object files (every unit but the Python bindings, CMake's object library
  `cfa_ops`, compiled against torch's stable ABI): after the symbols they define for each other,
  none may be a c10::, at:: or torch:: C++ symbol, a pybind11 one or a CPython one (Py*, _Py*).
  They are found beside the build (CHIPLET_FA_OBJECTS, else build/cpu's CMakeFiles/cfa_ops.dir
  in the checkout); skipped when there is none.
* the whole extension (nm -D): the same rule. The Python bindings (ops/python_module.cpp,
  locality/bind_locality.cpp, ops/emulated/bind_emulate.cpp) still use pybind11 and the libtorch
  C++ API until their move to CPython's limited API; until then this check is expected to fail
  (xfail, not strict).
"""
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import chiplet_fa

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(not (shutil.which("nm") and shutil.which("c++filt")),
                                reason="needs nm and c++filt (binutils)")
# Demangled names of the libtorch C++ API, pybind11 and CPython (vtables and typeinfo included).
FORBIDDEN = re.compile(r"^(?:(?:vtable|typeinfo|typeinfo name|VTT|construction vtable) for )?"
                       r"(?:(?:c10|at|torch|pybind11)::|_?Py[A-Z_]|_Py)")


def demangle(names):
    if not names:
        return []
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def symbols(args, path):
    out = subprocess.run(["nm", *args, str(path)], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


def forbidden(undefined):
    return sorted(name for name in demangle(sorted(undefined)) if FORBIDDEN.match(name))


def op_objects():
    folder = Path(os.environ.get("CHIPLET_FA_OBJECTS", ROOT / "build" / "cpu" / "CMakeFiles" / "cfa_ops.dir"))
    return sorted(folder.rglob("*.o")) if folder.is_dir() else []


def test_operator_objects_use_only_the_shim():
    objects = op_objects()
    if not objects:
        pytest.skip("no cfa_ops object files (set CHIPLET_FA_OBJECTS to a build's CMakeFiles/cfa_ops.dir)")
    undefined, defined = set(), set()
    for obj in objects:
        undefined |= symbols(["--undefined-only"], obj)
        defined |= symbols(["--defined-only"], obj)
    bad = forbidden(undefined - defined)
    assert not bad, f"{len(bad)} libtorch C++ / pybind11 / CPython symbols, e.g. {bad[:10]}"
    shim = [name for name in undefined if name.startswith(("aoti_torch_", "torch_"))]
    assert shim, "the operators call no torch shim function: is this the object library?"


@pytest.mark.xfail(strict=False, reason="the Python bindings (ops/python_module.cpp, locality/bind_locality.cpp, "
                   "ops/emulated/bind_emulate.cpp) still use pybind11 and the libtorch C++ API")
def test_extension_imports_no_libtorch_cpp_symbol():
    so = next(Path(chiplet_fa.__file__).parent.glob("_C*.so"))
    bad = forbidden(symbols(["-D", "--undefined-only"], so))
    assert not bad, f"{so.name} imports {len(bad)} libtorch C++ / pybind11 / CPython symbols, e.g. {bad[:10]}"
