"""bench/timing_probe.py's bookkeeping on the CPU (its timings need a GPU): each call timed once,
named, and read back into the per-copy summary."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("timing_probe", ROOT / "bench" / "timing_probe.py")
timing_probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(timing_probe)

pytestmark = pytest.mark.skipif(timing_probe.torch.cuda.is_available(), reason="the wall-clock path (no GPU)")


def test_timed_names_each_call_with_its_time_and_rate():
    log = []
    fns = {"head_first": lambda: log.append("h"), "cudnn": lambda: log.append("c")}
    parts = timing_probe.timed(fns, flops=2e9, fn_ms=lambda t: 2.0)
    # One warm-up call each (the timer's), then fn_ms's reading: 2 ms is 2000 us and 1 TFLOP/s.
    assert log == ["h", "c"]
    assert parts == ["head_first 2000.0 us (1)", "cudnn 2000.0 us (1)"]
    name, rest = parts[0].split(" ", 1)  # how main() reads a part back
    assert (name, float(rest.split(" ")[0])) == ("head_first", 2000.0)
