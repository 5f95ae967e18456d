"""tools/probes/timing_probe.py's bookkeeping on the CPU (its timings need a GPU): each call timed once,
under its name."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("timing_probe", ROOT / "tools" / "probes" / "timing_probe.py")
timing_probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(timing_probe)

pytestmark = pytest.mark.skipif(timing_probe.torch.cuda.is_available(), reason="the wall-clock path (no GPU)")


def test_timed_reads_each_call_under_its_name():
    log = []
    fns = {"head_first": lambda: log.append("h"), "cudnn": lambda: log.append("c")}
    ms = timing_probe.timed(fns, fn_ms=lambda t: 2.0)
    # One warm-up call each (the timer's), then fn_ms's reading.
    assert log == ["h", "c"]
    assert ms == {"head_first": 2.0, "cudnn": 2.0}
