"""`chiplet-fa simulate` (chiplet_fa/locality/cli.py)."""
import argparse
import io
import json
import sys

import pytest

from chiplet_fa.locality import cli


def run(argv):
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["simulate"] + argv)
    return args.func(args)


def test_table_and_json(capsys, tmp_path):
    out = tmp_path / "rows.json"
    assert run(["--gpu", "mi300x", "--heads", "32", "--seqlen", "4096", "--sweep",
                "--json", str(out)]) == 0
    text = capsys.readouterr()
    assert "mi300x" in text.out and "swizzled_head_first" in text.out and "sim hit" in text.out
    assert "simulate: 8/8 runs done" in text.err  # stderr is no terminal here: plain lines
    rows = json.loads(out.read_text())["rows"]
    assert sorted({r["seqlen"] for r in rows}) == [2048, 4096] and len(rows) == 8
    by = {(r["seqlen"], r["mapping"]): r for r in rows}
    assert by[(4096, "swizzled_head_first")]["sim_hit_rate"] > by[(4096, "block_first")]["sim_hit_rate"]


def test_progress_into_a_pipe_prints_lines_without_redraws(capsys):
    assert run(["--gpu", "mi300x", "--heads", "32", "--seqlen", "4096"]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err
    assert err.splitlines() == [f"simulate: {n}/4 runs done" for n in range(1, 5)]


class _Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("with_tqdm", [True, False])
def test_progress_on_a_terminal_redraws_one_line(monkeypatch, with_tqdm):
    if with_tqdm:
        pytest.importorskip("tqdm")
    else:
        monkeypatch.setitem(sys.modules, "tqdm", None)  # the text bar
    term = _Terminal()
    progress = cli._Progress(2, enabled=True, stream=term)
    for _ in range(2):
        progress.update(1, 2)
        progress.next_run()
    progress.close()
    assert "\r" in term.getvalue() and "runs done" not in term.getvalue()


def test_estimate_only_and_overrides(capsys):
    assert run(["--gpu", "h200", "--heads", "16", "--kv-heads", "4", "--seqlen", "8192",
                "--estimate-only", "--mappings", "head_first", "--wgs-per-cu", "2",
                "--stagger", "0.5", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "2 WGs per domain" in out and "sim hit" not in out and "H_kv=4" in out


def test_plot(tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "fig.png"
    assert run(["--gpu", "mi355x", "--heads", "8", "--seqlen", "4096", "--estimate-only",
                "--plot", str(png)]) == 0
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_packed_batch_with_seqlens(capsys, tmp_path):
    out = tmp_path / "rows.json"
    assert run(["--gpu", "mi300x", "--heads", "8", "--kv-heads", "2", "--seqlens", "3000,512,0,1200",
                "--seqlens-k", "3000,900,64,1200", "--causal", "--no-progress", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "packed B=4 N_q=3000,512,0,1200 N_k=3000,900,64,1200" in text and "sim hit" in text
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 4 and {r["seqlen"] for r in rows} == {3000}
    assert all(r["seqlens_q"] == [3000, 512, 0, 1200] and r["seqlens_k"] == [3000, 900, 64, 1200] for r in rows)
    from chiplet_fa.locality import Shape, estimate, preset
    shape = Shape(batch=4, num_q_heads=8, num_kv_heads=2, causal=True, seqlens_q=[3000, 512, 0, 1200],
                  seqlens_k=[3000, 900, 64, 1200])
    by = {r["mapping"]: r for r in rows}
    assert by["head_first"]["est_hit_rate"] == estimate(preset("mi300x"), shape, "head_first").hit_rate


@pytest.mark.parametrize("argv, match", [
    (["--seqlens", "4096,512", "--sweep"], "--sweep and --plot"),
    (["--seqlens", "4096,512", "--batch", "3"], "--batch 3 but --seqlens has 2"),
    (["--seqlens", "4096,512", "--seqlens-k", "9"], "--seqlens-k has 1 entries"),
    (["--seqlens-k", "9"], "--seqlens-k needs --seqlens"),
])
def test_seqlens_misuse(argv, match):
    with pytest.raises(SystemExit, match=match):
        run(argv + ["--estimate-only"])


def test_seqlens_must_be_lengths(capsys):
    with pytest.raises(SystemExit):
        run(["--seqlens", "4096,x"])
    assert "comma-separated lengths" in capsys.readouterr().err
