"""L2 hit rate and DRAM traffic of the backward's main pass (atomic and deterministic dQ,
head-first), measured with Nsight Compute.

  python tools/l2/bwd_l2_measure.py --out DIR            # driver: runs ncu on itself
  python tools/l2/bwd_l2_measure.py --from-csv DIR/bwd_l2_h200_ncu.csv --tag h200 --out DIR
Writes bwd_l2_<tag>.json (the tag: the GPU's model unless given), bwd_l2.md (a section per such JSON in --out) and the raw ncu
CSV under --out. One worker process runs each
point's forward and then its backward once; ncu profiles only the main pass (bwd_kv_kernel).
"""
import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import harness  # noqa: E402
from l2_measure import METRICS, parse_ncu_csv  # noqa: E402

# (B, H_q, H_kv, N, D, causal): GQA 64/8 causal at 32K, where one KV head's Q/dO/dQ exceed L2
# many times over, and two shapes whose rows fit.
SWEEP = [(1, 64, 8, 32768, 128, True), (1, 32, 32, 8192, 128, True), (4, 32, 8, 4096, 128, True)]
MODES = ("atomic", "det")


def plan():
    return [{"B": b, "H_q": hq, "H_kv": hkv, "N": n, "D": d, "causal": c, "mode": m}
            for (b, hq, hkv, n, d, c) in SWEEP for m in MODES]


def worker(points):
    import torch

    import chiplet_fa  # noqa: F401  (registers torch.ops.chiplet_fa)

    ops = torch.ops.chiplet_fa
    for p in points:
        gen = torch.Generator(device="cuda").manual_seed(0)
        q, do = (torch.randn(p["B"], p["N"], p["H_q"], p["D"], device="cuda", dtype=torch.bfloat16,
                             generator=gen) for _ in range(2))
        k, v = (torch.randn(p["B"], p["N"], p["H_kv"], p["D"], device="cuda", dtype=torch.bfloat16,
                            generator=gen) for _ in range(2))
        out, lse = ops.fwd(q, k, v, None, p["causal"], "head_first", 8)
        ops.bwd(do, q, k, v, out, lse, None, p["causal"], "head_first", 8, p["mode"] == "det")
        torch.cuda.synchronize()


def measured(points, kernels):
    """The points with their measured fields (None where ncu reported no kernel for one)."""
    ids = sorted(kernels)
    rows = []
    for i, p in enumerate(points):
        m = kernels[ids[i]] if i < len(ids) else {}
        rows.append(dict(p, hit_rate=m.get(METRICS[0]), dram_read_bytes=m.get(METRICS[1]),
                         time_ms=None if m.get(METRICS[3]) is None else 1e3 * m[METRICS[3]]))
    return rows


def markdown(result):
    lines = ["# Backward main pass: L2 hit rate and DRAM traffic (Nsight Compute), bf16, head_first", "",
             *harness.header_lines(result),
             "| B | H_q | H_kv | N | D | causal | dQ | L2 hit | DRAM read | kernel ms |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    f = lambda x, spec, unit="", scale=1: "n/a" if x is None else format(x * scale, spec) + unit  # noqa: E731
    for r in result["rows"]:
        lines.append(f"| {r['B']} | {r['H_q']} | {r['H_kv']} | {r['N']} | {r['D']} | "
                     f"{'yes' if r['causal'] else 'no'} | {r['mode']} | {f(r['hit_rate'], '.1f', '%')} | "
                     f"{f(r['dram_read_bytes'], '.1f', ' GB', 1e-9)} | {f(r['time_ms'], '.2f')} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="folder for the table, its JSON and the raw CSV (required)")
    ap.add_argument("--ncu", default="ncu")
    ap.add_argument("--timeout", type=int, default=400, help="seconds for the ncu run")
    ap.add_argument("--from-csv", type=Path, help="tabulate a saved ncu CSV instead of running ncu")
    ap.add_argument("--tag", help="names the files bwd_l2_<tag>.* (default: the GPU's model)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(json.loads(args.worker))
        return 0
    if args.out is None:
        ap.error("--out is required")
    points = plan()
    result = harness.result_header("bwd_l2", tag=args.tag)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.from_csv:
        raw, rc = args.from_csv.read_text(), 0
    else:
        ncu = shutil.which(args.ncu)
        if ncu is None:
            sys.exit(f"error: Nsight Compute ({args.ncu}) is not on PATH")
        cmd = [ncu, "--clock-control", "none", "--metrics", ",".join(METRICS), "--csv", "--print-units", "base",
               "--kernel-name", "regex:bwd_kv_kernel", "--launch-count", str(len(points)), sys.executable,
               str(Path(__file__).resolve()), "--worker", json.dumps(points)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        raw, rc = proc.stdout, proc.returncode
        (args.out / f"{harness.file_stem(result)}_ncu.csv").write_text(raw)
        if rc != 0:
            print(f"ncu exited with {rc}; stderr tail:\n{proc.stderr[-3000:]}", file=sys.stderr)
    kernels = parse_ncu_csv(raw)
    print(harness.save_results(args.out, dict(result, rows=measured(points, kernels)), markdown))
    return 0 if rc == 0 and len(kernels) == len(points) else 1


if __name__ == "__main__":
    sys.exit(main())
