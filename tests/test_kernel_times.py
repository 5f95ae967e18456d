"""tools/probes/kernel_times.py's arithmetic on the CPU: per-call kernel times and the span of a call."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("kernel_times", ROOT / "tools" / "probes" / "kernel_times.py")
kernel_times = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kernel_times)


def test_per_call_sums_each_kernel_and_spans_the_calls():
    # Two calls back to back, each a memset and a kernel, with gaps between them.
    events = [("memset", 0.0, 1.0), ("attn", 3.0, 103.0), ("memset", 110.0, 111.0), ("attn", 113.0, 213.0)]
    times, span = kernel_times.per_call(events, calls=2)
    assert times == {"memset": 1.0, "attn": 100.0}
    assert span == pytest.approx(213.0 / 2)  # first start to last end, per call: kernels and gaps


def test_per_call_says_when_nothing_was_recorded():
    with pytest.raises(RuntimeError, match="no GPU kernel"):
        kernel_times.per_call([], calls=20)
