"""`chiplet-fa simulate` (chiplet_fa/locality/cli.py)."""
import argparse
import json

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
    assert "simulate" in text.err  # the progress bar (tqdm, or the text one without it)
    rows = json.loads(out.read_text())["rows"]
    assert sorted({r["seqlen"] for r in rows}) == [2048, 4096] and len(rows) == 8
    by = {(r["seqlen"], r["mapping"]): r for r in rows}
    assert by[(4096, "swizzled_head_first")]["sim_hit_rate"] > by[(4096, "block_first")]["sim_hit_rate"]


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
