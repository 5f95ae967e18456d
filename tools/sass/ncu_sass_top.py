#!/usr/bin/env python3
"""The SASS instructions that carry a kernel's stalls and wasted shared-memory wavefronts, from the
per-instruction table Nsight Compute writes (`ncu -i R.ncu-rep --page source --print-source sass
--csv`, as `tools/device/device_run.sh profile` does).

  python3 tools/sass/ncu_sass_top.py profile_bwd_sass.csv                  # the default columns
  python3 tools/sass/ncu_sass_top.py profile_bwd_sass.csv --columns "Warp Stall Sampling (All" --top 20

A column is named by a case-insensitive part of its header; one that the table lacks is reported
and skipped (which counters a table has depends on the sections collected). Addresses, branch
targets included, are printed as offsets from the kernel's first instruction, as `cuobjdump -sass`
numbers them: the profiled kernel's SASS compiled anywhere (tools/sass/sass_diff.py's nvcc flags) lines
up with them.
"""
import argparse
import csv
import re
import sys

DEFAULT_COLUMNS = ("Warp Stall Sampling (All Samples)", "L1 Wavefronts Shared Excessive",
                   "L2 Theoretical Sectors Global Excessive")


def number(text):
    try:
        return float(text.replace(",", "").strip() or 0)
    except ValueError:
        return None


def read_table(lines):
    """(header, rows) of the table, skipping what precedes its header (profiler messages)."""
    lines = list(lines)
    start = next((i for i, line in enumerate(lines) if "Address" in line and "Source" in line), None)
    if start is None:
        raise ValueError("no header with 'Address' and 'Source': not an ncu source-page CSV")
    reader = csv.reader(lines[start:])
    header = next(reader)
    return header, [r for r in reader if len(r) == len(header)]


def column_of(header, part):
    found = [i for i, h in enumerate(header) if part.lower() in h.lower()]
    return found[0] if found else None


def kernel_span(rows, addr):
    """(first, last) address of the table's instructions (it lists one kernel)."""
    addresses = [int(r[addr], 16) for r in rows] or [0]
    return min(addresses), max(addresses)


def relative_targets(sass, base, end):
    """sass with each branch target inside [base, end] as a hex offset from base."""
    inside = lambda m: f"0x{int(m.group(0), 16) - base:x}" if base <= int(m.group(0), 16) <= end else m.group(0)
    return re.sub(r"0x[0-9a-f]{9,}", inside, sass.strip())


def top(header, rows, part, n):
    """[(offset, sass, value, share of the column's total)] of the n largest entries of a column;
    offsets and in-kernel branch targets count from the kernel's first instruction."""
    col = column_of(header, part)
    if col is None:
        return None
    addr, src = column_of(header, "Address"), column_of(header, "Source")
    base, end = kernel_span(rows, addr)
    values = [(number(r[col]) or 0.0, r) for r in rows]
    total = sum(v for v, _ in values)
    best = sorted(values, key=lambda vr: -vr[0])[:n]
    return [(f"{int(r[addr], 16) - base:x}", relative_targets(r[src], base, end), v, v / total if total else 0.0)
            for v, r in best if v > 0]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--columns", nargs="+", default=list(DEFAULT_COLUMNS))
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args(argv)
    with open(args.csv, newline="") as f:
        header, rows = read_table(f)
    print(f"{args.csv}: {len(rows)} instructions")
    for part in args.columns:
        entries = top(header, rows, part, args.top)
        if entries is None:
            print(f"\n{part}: not in this table", file=sys.stderr)
            continue
        print(f"\n{header[column_of(header, part)]}: top {len(entries)}")
        for addr, sass, value, share in entries:
            print(f"  {addr:>8}  {value:>14,.0f}  {100 * share:5.1f}%  {sass[:90]}")


if __name__ == "__main__":
    main()
