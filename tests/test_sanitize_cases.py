"""tools/device/sanitize_cases.py's choice of cases on a reduced build (what the device runs under
compute-sanitizer): a case the build lacks kernels for is left out, the others stay."""
import importlib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools" / "device"))
sanitize_cases = importlib.import_module("sanitize_cases")
build_coverage = importlib.import_module("build_coverage")


@pytest.fixture
def reduced_build(monkeypatch):
    """An sm90 build with these dtypes and head dims, forward and backward (no mma_sync kernels)."""
    def build(dtypes, head_dims):
        kernels = {"dtypes": dtypes, "head_dims": head_dims}
        monkeypatch.setattr(build_coverage, "family_kernels", lambda: {"fwd": kernels, "bwd": kernels})
        monkeypatch.setattr(build_coverage.chiplet_fa, "kernel_path", lambda: "sm90 on a test device")
        monkeypatch.setattr(build_coverage.chiplet_fa, "build_info", lambda: {"kernels": {}})
        return [i for i, (run, case) in enumerate(sanitize_cases.CASES) if sanitize_cases.in_build(run, case)]
    return build


def test_cases_outside_a_reduced_build_are_left_out(reduced_build):
    # CHIPLET_FA_HDIMS=64: D = 56, 20 and 64 run on the D = 64 kernels; 96-256 are not built.
    assert reduced_build(["bf16", "fp16"], [64]) == [1, 2, 4, 7, 11, 12, 19, 21]


def test_dtype_outside_a_reduced_build_is_left_out(reduced_build):
    assert reduced_build(["bf16"], [64, 128, 256]) == [0, 2, 3, 5, 7, 9, 10, 13, 14, 15, 16, 17, 18, 20]
