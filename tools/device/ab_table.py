"""The table tools/device/ab_run.sh prints last: one row per benchmark point, each variant's chiplet_fa
(head_first) TFLOP/s and its ratio to cuDNN measured in the same process; a backward point with
the deterministic mode measured gets a second row for it (`bwd-det`). A variant benchmarked in
rounds (`AB_ROUNDS`: a round<r>/ folder each) gets the median over its rounds, and its ratio's
range after the median ratio.

  python tools/device/ab_table.py OUT   # OUT holds a folder per variant, each with bench/fwd.py and/or
                                        # bench/bwd.py JSON files, or round folders of them
"""
import json
import statistics
import sys
from pathlib import Path

# (chiplet_fa, cuDNN) keys of the benchmarks' rows: bench/fwd.py, then bench/bwd.py.
KEYS = (("head_first", "sdpa_cudnn"), ("head_first_bwd", "sdpa_cudnn_bwd"))


def variant_rows(folder: Path):
    """Every benchmark's rows, each tagged with the benchmark (the JSON file's stem: fwd, bwd);
    rows of other tools in the folder (kernel_times.py's per-kernel times) are left out."""
    rows = []
    for f in sorted(folder.glob("*.json")):
        for row in json.loads(f.read_text())["rows"]:
            if not any(ours in row for ours, _ in KEYS):
                continue
            rows.append(dict(row, bench=f.name.split("_")[0]))
            if row.get("head_first_det_bwd") is not None:
                rows.append(dict(row, bench="bwd-det", head_first_bwd=row["head_first_det_bwd"]))
    return rows


def variant_rounds(folder: Path):
    """A variant's rows per round: its round<r>/ folders in order, or the folder itself."""
    rounds = sorted((d for d in folder.glob("round*") if d.is_dir()), key=lambda d: int(d.name[5:]))
    return [variant_rows(d) for d in rounds] or [variant_rows(folder)]


def cells(readings):
    """Point i of each round that has it: the median TFLOP/s and ratio, with the ratio's range."""
    for ours_key, cudnn_key in KEYS:
        ours = [row[ours_key] for row in readings if ours_key in row]
        if ours:
            ratios = [row[ours_key] / row[cudnn_key] for row in readings if ours_key in row and row.get(cudnn_key)]
            ratio = f"{statistics.median(ratios):.2f}" if ratios else "-"
            if len(ratios) > 1:
                ratio += f" ({min(ratios):.2f}-{max(ratios):.2f})"
            return [f"{statistics.median(ours):.0f}", ratio]
    return ["-", "-"]


def table(out: Path) -> str:
    variants = sorted(d for d in out.iterdir() if d.is_dir())
    rounds = {v.name: variant_rounds(v) for v in variants}
    points = max((r for rs in rounds.values() for r in rs), key=len, default=[])
    lines = ["| bench | shape | causal | " + " | ".join(f"{v.name} | / cuDNN" for v in variants) + " |",
             "|" + "---|" * (3 + 2 * len(variants))]
    for i, p in enumerate(points):
        shape = f"{p['B']}x{p['H_q']}/{p['H_kv']} N={p['N']} D={p['D']}"
        row = [c for v in variants for c in cells([rs[i] for rs in rounds[v.name] if i < len(rs)])]
        lines.append(f"| {p['bench']} | {shape} | {'yes' if p['causal'] else 'no'} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(table(Path(sys.argv[1])), end="")
