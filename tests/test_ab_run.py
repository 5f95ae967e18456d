"""tools/device/ab_run.sh's rounds (AB_ROUNDS) on this machine: pip, the smoke sweep and the benchmark
are stand-ins, so what is checked is the script's own work. Each variant's benchmark must import
that variant's build (not the last one installed), the rounds must take turns starting with a
different variant, and the table must give the medians and ranges over the rounds. Both device
scripts refuse to run the GPU tests on a build of one half dtype before installing anything."""
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Stands in for python3: `-m pip install .` "builds" a package that says which source it came from
# (marker.txt), the smoke sweep passes; anything else runs on the real interpreter.
FAKE_PYTHON = """#!/usr/bin/env bash
if [ "$1 $2" = "-m pip" ]; then
  rm -rf "$FAKE_SITE/chiplet_fa" && mkdir -p "$FAKE_SITE/chiplet_fa" &&
    cp marker.txt "$FAKE_SITE/chiplet_fa/marker" && : > "$FAKE_SITE/chiplet_fa/__init__.py"; exit
fi
[ "$4" = tests/test_gpu_smoke.py ] && { echo "1 passed"; exit 0; }
exec "$REAL_PYTHON" "$@"
"""

# The benchmark: 100 TFLOP/s on the tree's build, 110 on the patched one, cuDNN 100; it logs the
# order in which the variants ran.
FAKE_BENCH = """import json, pathlib, sys
import chiplet_fa
marker = (pathlib.Path(chiplet_fa.__file__).parent / "marker").read_text().strip()
out = pathlib.Path(sys.argv[sys.argv.index("--out") + 1])
row = dict(B=1, H_q=32, H_kv=32, N=8192, D=128, causal=False, head_first={"tree": 100.0, "fast": 110.0}[marker],
           sdpa_cudnn=100.0)
(out / "fwd_FAKE.json").write_text(json.dumps({"rows": [row]}))
with open(pathlib.Path(__file__).parent.parent / "order.log", "a") as f:
    f.write(marker + "\\n")
"""


@pytest.mark.skipif(shutil.which("git") is None or shutil.which("timeout") is None, reason="needs git and timeout")
def test_rounds_take_turns_on_each_variants_own_build(tmp_path):
    repo, bin_, site, out = (tmp_path / d for d in ("repo", "bin", "site", "out"))
    (repo / "tools" / "device").mkdir(parents=True)
    for f in ("ab_run.sh", "shared.sh", "ab_table.py"):
        shutil.copy(ROOT / "tools" / "device" / f, repo / "tools" / "device" / f)
    (repo / "bench").mkdir()
    (repo / "bench" / "fake_bench.py").write_text(FAKE_BENCH)
    (repo / "marker.txt").write_text("tree\n")
    (tmp_path / "fast.patch").write_text(
        "diff --git a/marker.txt b/marker.txt\n--- a/marker.txt\n+++ b/marker.txt\n@@ -1 +1 @@\n-tree\n+fast\n")
    bin_.mkdir()
    (bin_ / "python3").write_text(FAKE_PYTHON)
    (bin_ / "python3").chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_}:{os.environ['PATH']}", REAL_PYTHON=sys.executable, FAKE_SITE=str(site),
               PYTHONPATH=str(site), OUT=str(out), AB_ROUNDS="2", AB_BENCH="python3 bench/fake_bench.py")
    r = subprocess.run(["bash", "tools/device/ab_run.sh", str(tmp_path / "fast.patch")], cwd=repo, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    # The last build installed is the tree's again (the patch taken out), yet round 0 ran the patched
    # variant on its own package, and round 1 started with it.
    assert (repo / "order.log").read_text().split() == ["tree", "fast", "fast", "tree"]
    assert (repo / "marker.txt").read_text() == "tree\n"
    table = r.stdout.splitlines()
    assert table[-3] == "| bench | shape | causal | 0-tree | / cuDNN | 1-fast | / cuDNN |"
    assert table[-1] == "| fwd | 1x32/32 N=8192 D=128 | no | 100 | 1.00 (1.00-1.00) | 110 | 1.10 (1.10-1.10) |"
    with tarfile.open(out / "results.tgz") as t:
        names = t.getnames()
    assert "./1-fast/round1/fwd_FAKE.json" in names
    assert not any("/pkg" in n for n in names)  # the builds stay behind


@pytest.mark.parametrize("dtypes, refused", [("bf16", True), ("fp16", True), ("bf16,fp16", False)])
def test_tests_on_a_build_of_one_dtype_are_refused_before_any_install(tmp_path, dtypes, refused):
    # The tests skip only the head dims a build leaves out, not a dtype: a one-dtype build would
    # spend the call's installs on failures that say nothing of the patch.
    env = dict(os.environ, OUT=str(tmp_path / "out"), AB_TESTS="true", CHIPLET_FA_DTYPES=dtypes,
               AB_BENCH="true", PATH=f"{tmp_path}:{os.environ['PATH']}")
    (tmp_path / "python3").write_text("#!/usr/bin/env bash\necho install >> \"$OUT/../calls\"; exit 1\n")
    (tmp_path / "python3").chmod(0o755)
    r = subprocess.run(["bash", str(ROOT / "tools" / "device" / "ab_run.sh")], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=60)
    assert ("builds one only" in r.stderr) == refused
    assert (r.returncode == 2) == refused
    assert (tmp_path / "calls").exists() != refused  # the refused call installed nothing
    assert (tmp_path / "out").exists() != refused  # nor made its output folder


def test_device_run_refuses_the_tests_stage_on_a_build_of_one_dtype(tmp_path):
    env = dict(os.environ, OUT=str(tmp_path / "out"), CHIPLET_FA_DTYPES="bf16")
    r = subprocess.run(["bash", str(ROOT / "tools" / "device" / "device_run.sh"), "errors", "tests"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "builds one only" in r.stderr
    assert "=== build" not in r.stdout  # refused before the install
    assert not (tmp_path / "out").exists()  # and before anything else
