"""The main job, run the way a user runs it: `python -m chiplet_fa` in a fresh process."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import chiplet_fa

# The package under test, wherever it lives (installed, or an in-place build found via cwd).
PACKAGE_PARENT = str(Path(chiplet_fa.__file__).resolve().parent.parent)


def run_main(command, *args, tmp_path):
    env = dict(os.environ, PYTHONPATH=PACKAGE_PARENT)
    return subprocess.run([*command, *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)


def test_default_job_passes_and_reports_every_mapping(tmp_path):
    done = run_main([sys.executable, "-m", "chiplet_fa"], tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "self-check: PASS" in out and "FAIL" not in out
    device = "cuda" if torch.cuda.is_available() else "cpu"
    assert f"L2 domains detected: {chiplet_fa.num_l2_domains(device)}" in out
    for policy in chiplet_fa.MAPPINGS:
        assert f"{policy} " in out and f"  {policy:21s} ACCs in flight per XCD" in out
    assert "1024 m-blocks, 131072 workgroups, 128 ACCs, 8 XCDs" in out
    # Printed after this machine's L2 domains, the table says whose it is.
    assert ("Mapping report for an MI300X, 8 XCDs of 38 CUs (set by --xcds and --cus-per-xcd), not for this "
            "machine:\nMappings for B=1") in out


def test_run_subcommand_takes_the_shape(tmp_path):
    done = run_main([sys.executable, "-m", "chiplet_fa"], "run", "--heads", "28", "--kv-heads", "4",
                    "--seqlen", "1900", "--xcds", "8", "--show", "3", tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "15 m-blocks, 420 workgroups, 4 ACCs, 8 XCDs" in done.stdout
    assert "Mapping report for an MI300X" in done.stdout
    # 3 listed workgroups: rows start with the wid and its XCD.
    rows = [line.split()[:2] for line in done.stdout.splitlines() if line.startswith("    ")]
    assert [r for r in rows if r[0].isdigit()] == [["0", "0"], ["1", "1"], ["2", "2"]]


def test_a_part_other_than_the_mi300x_is_not_called_one(tmp_path):
    done = run_main([sys.executable, "-m", "chiplet_fa"], "--xcds", "4", "--seqlen", "256", "--show", "1",
                    tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Mapping report for a part with 4 XCDs of 38 CUs" in done.stdout and "MI300X" not in done.stdout


def test_help_lists_version_and_version_prints_the_build(tmp_path):
    done = run_main([sys.executable, "-m", "chiplet_fa"], "--help", tmp_path=tmp_path)
    assert done.returncode == 0 and "--version" in done.stdout
    done = run_main([sys.executable, "-m", "chiplet_fa"], "--version", tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"chiplet_fa {chiplet_fa.__version__}\n") and "kernel_path" in done.stdout


def test_options_alone_imply_run(tmp_path):
    done = run_main([sys.executable, "-m", "chiplet_fa"], "--heads", "6", "--seqlen", "256",
                    tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "2 m-blocks, 12 workgroups, 6 ACCs" in done.stdout


def test_unknown_subcommand_fails(tmp_path):
    done = run_main([sys.executable, "-m", "chiplet_fa"], "frobnicate", tmp_path=tmp_path)
    assert done.returncode == 2 and "invalid choice" in done.stderr


@pytest.mark.skipif(shutil.which("chiplet-fa") is None, reason="chiplet-fa is installed by pip install")
def test_console_script_runs(tmp_path):
    done = run_main(["chiplet-fa"], "--help", tmp_path=tmp_path)
    assert done.returncode == 0 and "run" in done.stdout
