"""L2 hit rate and DRAM traffic of chiplet_fa's forward kernel per mapping, measured with
Nsight Compute on an NVIDIA GPU, next to the L2 locality model's prediction.

  python tools/l2/l2_measure.py --out DIR                        # driver: runs ncu on itself
  python tools/l2/l2_measure.py --from-csv raw.csv --out DIR     # re-tabulate a saved ncu CSV
  python tools/l2/l2_measure.py --tag h100 --preset h100 --out DIR   # on an H100: its L2 in the model
  python tools/l2/l2_measure.py --shapes 8,16,16,2048,64,causal --causal yes \
      --mappings block_first head_first --tag h200_small_causal --out DIR   # other shapes, the causal mask
Writes l2_<tag>.json, l2.md (a section per l2 JSON under --out) and the raw ncu CSV under --out.
Shapes: bench/harness.py's grammar (non-causal unless --causal says otherwise). The driver launches one
worker process under `ncu --clock-control none` that runs each (shape, mapping) exactly once;
ncu profiles those launches (kernel name matching fwd_kernel) and nothing else. About 1-2 min
on an H200 for the default sweep.
"""
import argparse
import csv
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import harness  # noqa: E402

# The all-sector hit rate also counts the lookups of sectors passed between the H200's two L2
# partitions over the fabric; the SMs' own read sectors, their lookup hits, and the share of the
# bytes they read that DRAM did not have to supply say what the mapping did. Where misses are many
# the SMs' read sectors also grow beyond the kernel's loads (block_first: by about a quarter of
# its misses, and its hits are about that excess), so the last measure divides DRAM bytes by the
# bytes the kernel's loads ask for (Q once a tile, K and V of every key block: the model's trace
# of the same tiles).
METRICS = ("lts__t_sector_hit_rate.pct", "dram__bytes_read.sum",
           "lts__t_sectors_srcunit_ltcfabric.sum", "gpu__time_duration.sum",
           "lts__t_sectors_srcunit_tex_op_read.sum", "lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum",
           # Where orders differ in time but not in hits: the SMs' busy share of the kernel (a tail
           # shows as idle cycles) and the instructions issued (the producer's tile descriptions).
           "sm__cycles_active.avg", "sm__cycles_elapsed.avg", "smsp__inst_executed.sum")
SECTOR_BYTES = 32
MAPPINGS = ("block_first", "head_first", "swizzled_block_first", "swizzled_head_first")
# bf16: the anchors' shapes and one GQA shape.
SWEEP = [harness.Shape(1, 128, 128, 8192, 128), harness.Shape(1, 128, 128, 32768, 128), harness.Shape(1, 64, 8, 32768, 128)]
NUM_XCDS = 8  # the swizzled mappings assume 8 XCDs, as in ANCHORS.md; naive ones ignore it
UNIT_SCALE = {"": 1, "%": 1, "byte": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
              "sector": 1, "ksector": 1e3, "msector": 1e6, "gsector": 1e9, "nsecond": 1e-9,
              "usecond": 1e-6, "msecond": 1e-3, "second": 1, "cycle": 1, "inst": 1,
              # ncu 2025.3 prints durations as ns/us/ms/s even with --print-units base
              "ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1}


def plan(runs, mappings=MAPPINGS):
    """One point a (run, mapping); runs: (B, H_q, H_kv, N, D, causal) tuples."""
    return [{"B": b, "H_q": hq, "H_kv": hkv, "N": n, "D": d, "mapping": m, "causal": causal}
            for (b, hq, hkv, n, d, causal) in runs for m in mappings]


def worker(points):
    """One launch per point, in order: the n-th profiled kernel is points[n]."""
    import torch

    import chiplet_fa  # noqa: F401  (registers torch.ops.chiplet_fa)

    for p in points:
        gen = torch.Generator(device="cuda").manual_seed(0)
        q = torch.randn(p["B"], p["N"], p["H_q"], p["D"], device="cuda", dtype=torch.bfloat16, generator=gen)
        k = torch.randn(p["B"], p["N"], p["H_kv"], p["D"], device="cuda", dtype=torch.bfloat16, generator=gen)
        v = torch.randn_like(k)
        torch.ops.chiplet_fa.fwd(q, k, v, None, p["causal"], p["mapping"], NUM_XCDS)
        torch.cuda.synchronize()
        del q, k, v


def parse_ncu_csv(text):
    """ncu --csv output -> {kernel ID: {metric: value in base units}}; other lines are ignored."""
    start = text.find('"ID"')
    if start < 0:
        raise ValueError("no ncu CSV header (a line starting with \"ID\") in the ncu output")
    rows = csv.DictReader(io.StringIO(text[start:]))
    kernels = {}
    for row in rows:
        name, value = row.get("Metric Name"), row.get("Metric Value")
        if name not in METRICS or value is None:
            continue
        unit = (row.get("Metric Unit") or "").strip().lower()
        if unit not in UNIT_SCALE:
            raise ValueError(f"unknown ncu unit {unit!r} for {name}")
        number = float(value.replace(",", "")) * UNIT_SCALE[unit]
        kernels.setdefault(int(row["ID"]), {"kernel": row.get("Kernel Name", "")})[name] = number
    return kernels


def predict(point, wgs_per_cu, block_n, topology):
    from chiplet_fa.locality import Shape, estimate, preset, simulate

    topo = preset(topology, wgs_per_cu=wgs_per_cu)
    shape = Shape(batch=point["B"], num_q_heads=point["H_q"], num_kv_heads=point["H_kv"],
                  seqlen_q=point["N"], head_dim=point["D"], block_n=block_n, causal=point["causal"])
    sim = simulate(topo, shape, point["mapping"], mapping_xcds=NUM_XCDS)
    est = estimate(topo, shape, point["mapping"], mapping_xcds=NUM_XCDS)
    return {"pred_hit_rate": 100 * sim.hit_rate, "pred_dram_read_bytes": sim.dram_read_bytes,
            "est_hit_rate": 100 * est.hit_rate, "load_bytes": sim.kv_read_bytes + sim.q_read_bytes}


def combine(points, kernels, wgs_per_cu, block_n, topology):
    """Measured next to predicted, one row per point (measured fields None when missing)."""
    ids = sorted(kernels)
    if len(ids) != len(points):
        print(f"warning: ncu reported {len(ids)} kernels for {len(points)} launches; "
              "matching them in order", file=sys.stderr)
    rows = []
    for i, p in enumerate(points):
        m = kernels[ids[i]] if i < len(ids) else {}
        row = dict(p)
        row.update(hit_rate=m.get(METRICS[0]), dram_read_bytes=m.get(METRICS[1]),
                   fabric_sectors=m.get(METRICS[2]),
                   time_ms=None if m.get(METRICS[3]) is None else 1e3 * m[METRICS[3]],
                   inst_executed=m.get(METRICS[8]))
        active, elapsed = m.get(METRICS[6]), m.get(METRICS[7])
        row["sm_active"] = 100 * active / elapsed if active is not None and elapsed else None
        reads, hits = m.get(METRICS[4]), m.get(METRICS[5])
        row["sm_read_hit_rate"] = 100 * hits / reads if reads and hits is not None else None
        row["sm_reads_not_from_dram"] = (100 * (1 - row["dram_read_bytes"] / (SECTOR_BYTES * reads))
                                         if reads and row["dram_read_bytes"] is not None else None)
        row.update(predict(p, wgs_per_cu, block_n, topology))
        row["loads_not_from_dram"] = (None if row["dram_read_bytes"] is None
                                      else 100 * (1 - row["dram_read_bytes"] / row["load_bytes"]))
        row["ideal_dram_bytes"] = 2 * p["B"] * p["N"] * p["D"] * (p["H_q"] + 2 * p["H_kv"])
        rows.append(row)
    return rows


def fmt(x, spec):
    return "n/a" if x is None else format(x, spec)


def pct(x):
    return fmt(x, ".2f") + ("%" if x is not None else "")


def markdown(result):
    rows, topology = result["rows"], result["preset"]
    lines = [f"# L2 hit rate and DRAM traffic per mapping: {result['tag']}, measured vs model", "",
             *harness.header_lines(result),
             "Measured: Nsight Compute (`--clock-control none`), one launch per row, bf16, "
             f"{'causal' if rows and rows[0]['causal'] else 'non-causal'}, swizzled mappings with "
             f"num_xcds={NUM_XCDS}. Predicted: the L2 locality "
             f"model's simulator ({topology} preset), closed form in brackets. L2 hit measured counts all L2 "
             "sectors (`lts__t_sector_hit_rate.pct`, fabric lookups included); SM reads hit: the "
             "SMs' read sectors that hit (`lts__t_sectors_srcunit_tex_op_read_lookup_hit` / "
             "`_op_read`); not from DRAM: 1 - DRAM read bytes / the SMs' read bytes; loads not from "
             "DRAM: 1 - DRAM read bytes / the bytes the kernel's loads ask for (the model's trace), "
             "the measured counterpart of the predicted rate. DRAM is `dram__bytes_read.sum`. SM "
             "active: `sm__cycles_active.avg` / `sm__cycles_elapsed.avg`; inst: "
             "`smsp__inst_executed.sum`.", "",
             "| B | H_q | H_kv | N | D | mapping | L2 hit measured | SM reads hit | SM reads not from DRAM | "
             "loads not from DRAM | L2 hit predicted | DRAM read measured | DRAM read predicted | ideal DRAM | "
             "fabric sectors | kernel ms | SM active | inst (M) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        gb = lambda b: fmt(None if b is None else b / 1e9, ".2f") + (" GB" if b is not None else "")  # noqa: E731
        lines.append(
            f"| {r['B']} | {r['H_q']} | {r['H_kv']} | {r['N']} | {r['D']} | {r['mapping']} | "
            f"{pct(r['hit_rate'])} | {pct(r['sm_read_hit_rate'])} | {pct(r['sm_reads_not_from_dram'])} | "
            f"{pct(r['loads_not_from_dram'])} | "
            f"{r['pred_hit_rate']:.2f}% ({r['est_hit_rate']:.1f}%) | "
            f"{gb(r['dram_read_bytes'])} | {gb(r['pred_dram_read_bytes'])} | {gb(r['ideal_dram_bytes'])} | "
            f"{fmt(r['fabric_sectors'], '.3g')} | {fmt(r['time_ms'], '.3f')} | {pct(r['sm_active'])} | "
            f"{fmt(None if r['inst_executed'] is None else r['inst_executed'] / 1e6, '.1f')} |")
    return "\n".join(lines) + "\n"


def write(result, out, raw_csv=None):
    """l2_<tag>.json, its table and (from an ncu run) the raw CSV."""
    out.mkdir(parents=True, exist_ok=True)
    if raw_csv is not None:
        (out / f"l2_{result['tag']}_ncu.csv").write_text(raw_csv)
    print(harness.save_results(out, result, markdown))


def run_ncu(points, ncu, timeout):
    cmd = [ncu, "--clock-control", "none", "--metrics", ",".join(METRICS), "--csv",
           "--print-units", "base", "--kernel-name", "regex:fwd_kernel",
           "--launch-count", str(len(points)), sys.executable, str(Path(__file__).resolve()),
           "--worker", json.dumps(points)]
    print("running:", " ".join(cmd[:-1]), "'<points>'", flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        print(f"ncu exited with {proc.returncode}; stderr tail:\n{proc.stderr[-3000:]}", file=sys.stderr)
    return proc.stdout, proc.returncode


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="folder for the files (required)")
    ap.add_argument("--tag", default="h200", help="names the output files l2_<tag>.*")
    ap.add_argument("--quick", action="store_true", help="only B=1 H=128 N=8K")
    harness.add_shapes_arguments(ap, "the sweep", causal_default="no")
    ap.add_argument("--mappings", nargs="+", choices=MAPPINGS, default=list(MAPPINGS))
    ap.add_argument("--preset", default="h200", choices=("h100", "h200"),
                    help="the L2 model's topology for the predicted columns (the GPU measured)")
    ap.add_argument("--ncu", default="ncu")
    ap.add_argument("--timeout", type=int, default=900, help="seconds for the ncu run")
    ap.add_argument("--wgs-per-cu", type=int, default=1, help="resident CTAs per SM in the model")
    ap.add_argument("--block-n", type=int, default=64, help="keys per K/V step in the model")
    ap.add_argument("--from-csv", type=Path, help="tabulate a saved ncu CSV instead of running ncu")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(json.loads(args.worker))
        return 0
    if args.out is None:
        ap.error("--out is required")
    points = plan(harness.shape_runs(args, SWEEP[:1] if args.quick else SWEEP), args.mappings)
    # A saved CSV may be tabulated anywhere: the GPU is then the preset's.
    result = harness.result_header("l2", tag=args.tag, preset=args.preset)
    if args.from_csv:
        result["gpu"] = f"{args.preset} (from {args.from_csv.name})"
    if argv is not None:
        result["command"] = " ".join(["python tools/l2/l2_measure.py", *argv])
    if args.from_csv:
        raw, rc = args.from_csv.read_text(), 0
    else:
        ncu = shutil.which(args.ncu)
        if ncu is None:
            print(f"error: Nsight Compute ({args.ncu}) is not on PATH", file=sys.stderr)
            return 2
        raw, rc = run_ncu(points, ncu, args.timeout)
    try:
        kernels = parse_ncu_csv(raw)
    except ValueError as exc:
        print(f"error: {exc}; ncu stdout tail:\n{raw[-3000:]}", file=sys.stderr)
        if not args.from_csv:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"l2_{args.tag}_ncu.csv").write_text(raw)
        return 1
    result["rows"] = combine(points, kernels, args.wgs_per_cu, args.block_n, args.preset)
    write(result, args.out, None if args.from_csv else raw)
    return 0 if rc == 0 and len(kernels) == len(points) else 1


if __name__ == "__main__":
    sys.exit(main())
