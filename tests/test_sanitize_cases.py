"""bench/sanitize_cases.py's choice of cases on a reduced build (what the device runs under
compute-sanitizer): a case the build lacks kernels for is left out, the others stay."""
import importlib
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
sanitize_cases = importlib.import_module("sanitize_cases")
gpu_smoke = importlib.import_module("gpu_smoke")


def test_cases_outside_a_reduced_build_are_left_out(monkeypatch):
    kernels = {"dtypes": ["bf16", "fp16"], "head_dims": [64]}  # CHIPLET_FA_HDIMS=64
    monkeypatch.setattr(gpu_smoke, "family_kernels", lambda: {"fwd": kernels, "bwd": kernels})
    monkeypatch.setattr(gpu_smoke.chiplet_fa, "kernel_path", lambda: "sm90 on a test device")
    monkeypatch.setattr(gpu_smoke.chiplet_fa, "build_info", lambda: {"kernels": {}})
    kept = [i for i, (run, case) in enumerate(sanitize_cases.CASES) if sanitize_cases.in_build(run, case)]
    heads = {i: (c[5], c[7]) if r is sanitize_cases.dense else (c[0], c[1])
             for i, (r, c) in enumerate(sanitize_cases.CASES)}
    assert kept == [i for i, (d, _) in heads.items() if d <= 64]
    assert 4 in kept and 0 not in kept  # D = 20 runs on the D = 64 kernels; D = 128 is not built


def test_dtype_outside_a_reduced_build_is_left_out(monkeypatch):
    kernels = {"dtypes": ["bf16"], "head_dims": [64, 128, 256]}
    monkeypatch.setattr(gpu_smoke, "family_kernels", lambda: {"fwd": kernels, "bwd": kernels})
    monkeypatch.setattr(gpu_smoke.chiplet_fa, "kernel_path", lambda: "sm90 on a test device")
    kept = {i for i, (run, case) in enumerate(sanitize_cases.CASES) if sanitize_cases.in_build(run, case)}
    for i, (run, case) in enumerate(sanitize_cases.CASES):
        dtype = case[7] if run is sanitize_cases.dense else case[1]
        assert (i in kept) == (dtype == torch.bfloat16)
