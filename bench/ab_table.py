"""The table bench/ab_run.sh prints last: one row per benchmark point, each variant's chiplet_fa
(head_first) TFLOP/s and its ratio to cuDNN measured in the same process; a backward point with
the deterministic mode measured gets a second row for it (`bwd-det`).

  python bench/ab_table.py OUT    # OUT holds a folder per variant, each with bench/fwd.py and/or
                                  # bench/bwd.py JSON files
"""
import json
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


def cells(row):
    for ours_key, cudnn_key in KEYS:
        if ours_key in row:
            ours, cudnn = row[ours_key], row.get(cudnn_key)
            return [f"{ours:.0f}", f"{ours / cudnn:.2f}" if cudnn else "-"]
    return ["-", "-"]


def table(out: Path) -> str:
    variants = sorted(d for d in out.iterdir() if d.is_dir())
    rows = {v.name: variant_rows(v) for v in variants}
    points = max(rows.values(), key=len, default=[])
    lines = ["| bench | shape | causal | " + " | ".join(f"{v.name} | / cuDNN" for v in variants) + " |",
             "|" + "---|" * (3 + 2 * len(variants))]
    for i, p in enumerate(points):
        shape = f"{p['B']}x{p['H_q']}/{p['H_kv']} N={p['N']} D={p['D']}"
        row = [c for v in variants for c in (cells(rows[v.name][i]) if i < len(rows[v.name]) else ["-", "-"])]
        lines.append(f"| {p['bench']} | {shape} | {'yes' if p['causal'] else 'no'} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(table(Path(sys.argv[1])), end="")
