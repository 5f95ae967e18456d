"""The issue tables of bench/fwd.py and bench/bwd.py (markdown from result rows, no GPU): the ratio
columns follow the peers that ran, and every row has the header's cells."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load(name):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def table_rows(md):
    """Cells of each table line (header, separator and rows) of a markdown text."""
    return [line.strip("|").split("|") for line in md.splitlines() if line.startswith("|")]


def result(*rows):
    return {"command": "python bench/x.py", "tree": "abc1234", "gpu": "GPU", "clocks": None, "rows": list(rows)}


def shape(**extra):
    return {"B": 1, "H_q": 32, "H_kv": 32, "N": 8192, "D": 128, "causal": False, "timing": "of replays", **extra}


@pytest.mark.parametrize("peers,ratios", [(("sdpa_flash", "sdpa_cudnn"), ["flash", "cuDNN"]),
                                          (("sdpa_cudnn",), ["cuDNN"])])
def test_forward_table_has_a_ratio_a_peer(peers, ratios):
    fwd = load("fwd")
    row = shape(block_first=500.0, head_first=600.0, **{p: 550.0 for p in peers})
    md = fwd.markdown(result(row))
    header, sep, cells = table_rows(md)
    assert [h.strip() for h in header][-1 - len(ratios):] == ["head_first / block_first"] + [
        f"head_first / {r}" for r in ratios]
    assert len(header) == len(sep) == len(cells)
    assert cells[-1].strip() == "1.09"  # 600 / 550
    assert ("flash" in md) == ("sdpa_flash" in peers)


@pytest.mark.parametrize("peers", [("sdpa_flash", "sdpa_cudnn"), ("sdpa_cudnn",)])
def test_backward_tables_have_a_ratio_a_peer(peers):
    bwd = load("bwd")
    row = shape(head_first_bwd=520.0, head_first_fwdbwd=540.0, head_first_det_bwd=480.0,
                **{f"{p}_{k}": 500.0 for p in peers for k in ("bwd", "fwdbwd")})
    md = bwd.markdown(result(row))
    tables = table_rows(md)
    assert len(tables) == 6  # header, separator and one row, backward then forward+backward
    for header, sep, cells in (tables[:3], tables[3:]):
        assert len(header) == len(sep) == len(cells)
        assert header[-1].strip() == "best / cuDNN"
        assert ("best / flash" in "|".join(header)) == ("sdpa_flash" in peers)
    assert tables[2][-1].strip() == "1.04" and tables[5][-1].strip() == "1.08"  # 520 / 500, 540 / 500


def test_clock_column_when_the_clocks_were_sampled():
    fwd, bwd = load("fwd"), load("bwd")
    row = shape(block_first=500.0, head_first=600.0, sdpa_cudnn=550.0, head_first_mhz=1755.4, sdpa_cudnn_mhz=None)
    header, _, cells = table_rows(fwd.markdown(result(row)))
    assert header[-1].strip() == "SM MHz head_first / cuDNN" and cells[-1].strip() == "1755 / n/a"
    assert "SM MHz" not in fwd.markdown(result(shape(head_first=600.0, sdpa_cudnn=550.0)))
    row = shape(head_first_bwd=520.0, head_first_fwdbwd=540.0, head_first_det_bwd=480.0, sdpa_cudnn_bwd=500.0,
                sdpa_cudnn_fwdbwd=500.0, head_first_bwd_mhz=1700.0, sdpa_cudnn_bwd_mhz=1650.0,
                head_first_fwdbwd_mhz=1500.0, sdpa_cudnn_fwdbwd_mhz=1626.0)
    tables = table_rows(bwd.markdown(result(row)))
    assert [t[-1].strip() for t in (tables[2], tables[5])] == ["1700 / 1650", "1500 / 1626"]
    assert all(len(t) == len(tables[0]) for t in tables[:3])


def test_timed_windows_become_column_clocks():
    harness = load("harness")
    log = harness.ClockLog()
    log.rows = [(1.0, 1500.0, 600.0), (2.0, 1700.0, 650.0), (5.0, 1980.0, 300.0)]
    rows = [{"windows": {"head_first": [(0.5, 1.5), (1.9, 2.1)], "sdpa_cudnn": [(4.0, 6.0)], "block_first": [(3, 4)]}}]
    harness.column_clocks(rows, log)
    assert rows == [{"head_first_mhz": 1600.0, "sdpa_cudnn_mhz": 1980.0, "block_first_mhz": None}]


def test_fa4_columns_where_it_ran():
    """FlashAttention-4's columns: forward ratio, backward ratio, deterministic against its
    deterministic mode, varlen and decoding columns; versions in the header."""
    fwd, bwd, varlen, decode = (load(n) for n in ("fwd", "bwd", "varlen", "decode"))
    header, _, cells = table_rows(fwd.markdown(result(shape(block_first=500.0, head_first=600.0, fa4=480.0))))
    assert header[-1].strip() == "head_first / FA4" and cells[-1].strip() == "1.25"
    row = shape(head_first_bwd=520.0, head_first_fwdbwd=540.0, head_first_det_bwd=480.0, fa4_bwd=400.0,
                fa4_fwdbwd=450.0, fa4_det_bwd=320.0)
    md = bwd.markdown(dict(result(row), torch="2.11.0", peer_versions={"fa4": "4.0.0b36"}))
    assert "Versions: torch 2.11.0, FA4 4.0.0b36." in md
    tables = table_rows(md)
    assert [h.strip() for h in tables[0][-2:]] == ["best / FA4", "det / FA4 det"]
    assert [c.strip() for c in tables[2][-2:]] == ["1.30", "1.50"]  # 520 / 400, 480 / 320
    assert len(tables[0]) == len(tables[1]) == len(tables[2])
    vrow = {"mix": "m", "sequences": 2, "tokens": 8, "H_q": 32, "H_kv": 8, "D": 128, "causal": True,
            "varlen_fwd": 400.0, "dense_fwd": 400.0, "varlen_bwd": 300.0, "dense_bwd": 300.0,
            "sdpa_flash_per_seq_fwd": 100.0, "fa4_fwd": 500.0, "fa4_bwd": None}
    header, sep, cells = table_rows(varlen.markdown(result(vrow)))
    assert len(header) == len(sep) == len(cells) and [c.strip() for c in cells[-2:]] == ["0.80", "n/a"]
    drow = {"H_q": 32, "H_kv": 8, "D": 128, "cache": 8192, "batch": 1, "layout": "page16", "new": 1,
            "chiplet_fa_ms": 0.02, "chiplet_fa_gbps": 400.0, "sdpa_flash_ms": None, "sdpa_efficient_ms": 0.05,
            "sdpa_cudnn_ms": 0.04, "fa4_ms": 0.025}
    header, sep, cells = table_rows(decode.markdown(dict(result(drow), copy_gbps=4000.0)))
    assert header[-2].strip() == "fa4 us" and cells[-1].strip() == "1.25" and len(header) == len(cells)
