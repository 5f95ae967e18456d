"""bench/models.py (the transformers end-to-end benchmark run on the GPU) in its CPU smoke mode."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "models.py"


def test_tiny_run_writes_its_tables_and_meets_the_2x_rule(tmp_path):
    cmd = [sys.executable, str(SCRIPT), "--tiny", "--out", str(tmp_path), "--models", "gemma2",
           "--batches", "padded", "packed"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads((tmp_path / "models_cpu.json").read_text())["rows"]
    assert [(r["batch"], r["task"]) for r in rows] == [("padded", "prefill"), ("padded", "train"),
                                                       ("packed", "prefill"), ("packed", "train")]
    for r in rows:
        assert r["two_x"], r
        assert 0 < r["chiplet_fa_err"] < 1e-4 and 0 < r["eager_chunked_err"] < 1e-4 and r["chiplet_fa_ms"] > 0
        assert r["sdpa_ms"] is None or r["sdpa_ms"] > 0  # transformers > 5.17 refuses SDPA for Gemma 2
    generated = json.loads((tmp_path / "models_cpu.json").read_text())["generate"]
    assert [r["batch"] for r in generated] == [1, 8, 64]
    for r in generated:  # transformers > 5.17 refuses SDPA for Gemma 2
        assert r["chiplet_fa_tok_s"] > 0 and (r["sdpa_tok_s"] is None or 0 <= r["same_tokens"] <= 1), r
    table = (tmp_path / "models.md").read_text()
    assert "| gemma2 | packed | train | 64 |" in table and "| gemma2 | 64 | 16 | 32 | " in table
