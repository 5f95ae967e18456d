"""What setup.py declares: the install brings what every command needs, and the transformers
extra names the range CI tests at both ends."""
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import chiplet_fa

ROOT = Path(__file__).resolve().parent.parent
SETUP = runpy.run_path(str(ROOT / "setup.py"), run_name="setup")  # not __main__: declares, builds nothing


def test_install_brings_numpy_so_torch_does_not_warn(tmp_path):
    # torch warns "Failed to initialize NumPy" on import without numpy; chiplet_fa itself imports none.
    assert "numpy" in SETUP["INSTALL_REQUIRES"]
    imports = re.compile(r"^\s*(import|from)\s+numpy\b", re.MULTILINE)
    assert not [p for p in (ROOT / "chiplet_fa").rglob("*.py") if imports.search(p.read_text())]
    env = dict(os.environ, PYTHONPATH=str(Path(chiplet_fa.__file__).resolve().parent.parent))
    done = subprocess.run([sys.executable, "-m", "chiplet_fa", "--help"], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0 and "NumPy" not in done.stderr, done.stderr


def test_transformers_extra_is_the_range_ci_tests_at_both_ends():
    spec, = SETUP["EXTRAS_REQUIRE"]["transformers"]
    low, below = re.fullmatch(r"transformers>=(\d+\.\d+),<(\d+\.\d+)", spec).groups()
    pins = re.findall(r"transformers==(\d+)\.(\d+)\.\d+", (ROOT / ".ci" / "cpu_tests.sh").read_text())
    tested = sorted((int(major), int(minor)) for major, minor in pins)
    major, minor = map(int, below.split("."))
    assert tested[0] == tuple(map(int, low.split("."))) and tested[-1] == (major, minor - 1), (spec, tested)
