"""What chiplet_fa._C links against (tools/check_abi.py): torch's C shim, CPython's stable ABI and the
runtimes only, so that one file loads under every torch from 2.11 on and every CPython from 3.10 on."""
import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

import chiplet_fa

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(not all(shutil.which(t) for t in ("nm", "readelf", "c++filt")),
                                reason="needs nm, readelf and c++filt (binutils)")


def load_check():
    spec = importlib.util.spec_from_file_location("check_abi", ROOT / "tools" / "check_abi.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def extension():
    return Path(chiplet_fa._C.__file__)


def test_extension_uses_only_the_shim_and_the_stable_abi():
    check = load_check()
    so = extension()
    assert check.problems(so) == []
    shim = [raw for raw, _ in check.undefined_symbols(so) if raw.startswith(("aoti_torch_", "torch_"))]
    assert shim, "no torch shim function imported: is this chiplet_fa's _C?"
    assert "libtorch_cpu.so" in check.needed(so)


def test_the_check_catches_a_libtorch_cpp_dependency(tmp_path):
    """The rule fails where it should: a library using the libtorch C++ API and named per Python."""
    check = load_check()
    src = tmp_path / "uses_c10.cpp"
    src.write_text("namespace c10 { void warn_about(int); }\nvoid f() { c10::warn_about(1); }\n")
    so = tmp_path / "_C.cpython-311-x86_64-linux-gnu.so"
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if not cxx:
        pytest.skip("no C++ compiler")
    subprocess.run([cxx, "-shared", "-fPIC", str(src), "-o", str(so)], check=True)
    found = check.problems(so)
    assert any("not an abi3 extension" in p for p in found)
    assert any("c10::warn_about" in p for p in found)
