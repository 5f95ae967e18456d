"""bench/harness.py's ClockLog against a stand-in `nvidia-smi` on PATH: which power field it asks for, how
it reads the samples, and what a window without samples gives."""
import importlib.util
import os
import stat
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("harness", ROOT / "bench" / "harness.py")
clock_log = importlib.util.module_from_spec(spec)
spec.loader.exec_module(clock_log)

# Samples GPU 3 only; rejects the instant power field, as older drivers do; 1500 MHz / 600 W otherwise.
FAKE = """#!/bin/sh
case "$*" in "-i 3 "*) ;; *) echo "not the GPU asked for: $*" >&2; exit 3;; esac
case "$*" in *power.draw.instant*) echo 'Field "power.draw.instant" is not a valid field' >&2; exit 2;; esac
while true; do
  echo "$(date '+%Y/%m/%d %H:%M:%S').500, 1500, 600.0"
  echo "garbage line"
  sleep 0.02
done
"""


@pytest.fixture
def fake_smi(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")  # the benchmarks' device 0 is nvidia-smi's 3
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE)
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


def test_samples_in_the_window_are_averaged(fake_smi):
    with clock_log.ClockLog() as log:
        t0 = time.time() - 2.0  # the stand-in stamps each sample at half past its second
        time.sleep(0.2)
        t1 = time.time() + 1.0
    assert log.power == "power.draw"  # fell back from the field the stand-in rejects
    mhz, watts, samples = log.window([(t0, t1)])
    assert (mhz, watts) == (1500.0, 600.0) and samples >= 2


def test_a_window_without_samples_gives_none(fake_smi):
    with clock_log.ClockLog() as log:
        time.sleep(0.1)
    assert log.window([(0.0, 1.0)]) is None


def test_without_nvidia_smi_nothing_is_sampled(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with clock_log.ClockLog() as log:
        pass
    assert log.proc is None and log.window([(0.0, time.time())]) is None
