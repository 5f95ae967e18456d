"""Forward TFLOP/s of chiplet_fa per mapping against torch SDPA backends, one process.

  python bench/fwd.py --out bench/results            # issue #12's sweep against SDPA (H200: ~2 min)
  python bench/fwd.py --quick --out /tmp/r            # three shapes, for iterating
  python bench/fwd.py --shapes 8,16,16,2048,64,causal 1,32,8,8192,128 --out /tmp/r   # chosen shapes
  python bench/fwd.py --settle-ms 1500 --peers sdpa_cudnn --out /tmp/r   # the settled issue table
Writes fwd_<gpu>.json and generates fwd.md again (a section per fwd JSON in --out); --plot
draws TFLOP/s per mapping (needs matplotlib). Shapes: bench/harness.py's grammar.
"""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402
from harness import PEER_NAMES, Shape, fmt  # noqa: E402

import chiplet_fa  # noqa: E402,F401  (registers the operators)

try:  # a progress bar where tqdm is installed, plain lines otherwise
    from tqdm import tqdm
except ImportError:
    tqdm = None

MAPPINGS = ("block_first", "head_first", "swizzled_block_first", "swizzled_head_first")
# The default mappings; --all-columns adds the swizzled policies (which assume 8 XCDs: no better
# than head_first on a one-L2 GPU).
DEFAULT_MAPPINGS = ("block_first", "head_first")
DEFAULT_PEERS = ("sdpa_flash", "sdpa_cudnn")
# Issue #12's points: D=128 at H 32, 128 and GQA 64/8 over N 8K-64K; D=56 (DeepSeek-V3), 64 and
# 256; the two small causal shapes.
SWEEP = ([Shape(1, h, kv, n, 128) for h, kv in ((32, 32), (128, 128), (64, 8)) for n in (8192, 16384, 32768, 65536)]
         + [Shape(1, 128, 128, n, 56) for n in (8192, 32768)]
         + [Shape(1, 64, 64, 16384, 64), Shape(1, 16, 16, 16384, 256)]
         + [Shape(8, 16, 16, 2048, 64, True), Shape(4, 32, 8, 4096, 128, True)])
QUICK = [Shape(1, 128, 128, 8192, 128), Shape(1, 64, 8, 8192, 128, True), Shape(1, 128, 128, 8192, 64, False)]


def run_shape(b, hq, hkv, n, d, causal, num_xcds, mappings, peers, timing):
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(b, n, hq, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    k = torch.randn(b, n, hkv, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    v = torch.randn(b, n, hkv, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    flops = harness.attention_flops(b, hq, n, n, d, causal)
    row = {"B": b, "H_q": hq, "H_kv": hkv, "N": n, "D": d, "causal": causal, "timing": harness.timing_note(**timing)}
    fns = {m: (lambda m=m: torch.ops.chiplet_fa.fwd(q, k, v, None, causal, m, num_xcds)) for m in mappings}
    fns.update(harness.peer_forwards(peers, q, k, v, causal))
    windows = {}
    for name, ms in harness.time_in_turns(fns, **timing, windows=windows).items():
        row[name] = None if ms is None else flops / ms / 1e9
    row["windows"] = windows  # column_clocks turns them into each column's SM clock
    return row


def markdown(result):
    rows = result["rows"]
    cols = [c for c in (*MAPPINGS, *PEER_NAMES) if c in rows[0]]
    ratios = [c for c in ("block_first", *PEER_NAMES) if c in rows[0]]
    clocks = "head_first_mhz" in rows[0] and "sdpa_cudnn_mhz" in rows[0]
    lines = [f"# chiplet_fa forward, {result['gpu']}, bf16 (TFLOP/s, median {rows[0]['timing']}; causal FLOPs halved)",
             "", *harness.header_lines(result),
             "| B | H_q | H_kv | N | D | causal | " + " | ".join(cols) + " | "
             + " | ".join(f"head_first / {PEER_NAMES.get(c, c)}" for c in ratios)
             + (" | SM MHz head_first / cuDNN" if clocks else "") + " |",
             "|" + "---|" * (6 + len(cols) + len(ratios) + clocks)]
    for r in rows:
        ratio = lambda key: "n/a" if not r.get(key) else f"{r['head_first'] / r[key]:.2f}"  # noqa: E731
        lines.append(f"| {r['B']} | {r['H_q']} | {r['H_kv']} | {r['N']} | {r['D']} | "
                     f"{'yes' if r['causal'] else 'no'} | " + " | ".join(fmt(r[c]) for c in cols)
                     + " | " + " | ".join(ratio(c) for c in ratios)
                     + (f" | {harness.clock_pair(r, 'head_first', 'sdpa_cudnn')}" if clocks else "") + " |")
    return "\n".join(lines) + "\n"


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = [f"{r['B']}x{r['H_q']}/{r['H_kv']}\nN={r['N'] // 1024}K d{r['D']}{' c' if r['causal'] else ''}"
              for r in rows]
    fig, ax = plt.subplots(figsize=(max(8, len(rows) * 0.9), 4.5))
    cols = [c for c in (*MAPPINGS, *PEER_NAMES) if c in rows[0]]
    width = 0.8 / len(cols)
    for i, c in enumerate(cols):
        ax.bar([x + i * width for x in range(len(rows))], [r[c] or 0 for r in rows], width, label=c)
    ax.set_xticks([x + 0.4 for x in range(len(rows))], labels, fontsize=7)
    ax.set_ylabel("TFLOP/s")
    ax.legend(fontsize=7, ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def measure(runs, mappings, args):
    """One row a run, a progress line each."""
    rows = []
    bar = tqdm(total=len(runs), unit="shape") if tqdm else None
    for i, (*shape, causal) in enumerate(runs):
        rows.append(run_shape(*shape, causal, args.num_xcds, mappings, args.peers, harness.timing_options(args)))
        r = rows[-1]
        line = (f"{tuple(shape)} causal={causal}: head_first {r['head_first']:.0f}, block_first "
                f"{fmt(r.get('block_first'))}, " + ", ".join(f"{PEER_NAMES[p]} {fmt(r[p])}" for p in args.peers))
        if bar:
            bar.set_postfix_str(line)
            bar.update()
        else:
            print(f"[{i + 1}/{len(runs)}] {line}", flush=True)
        torch.cuda.empty_cache()
    if bar:
        bar.close()
    return rows


def parser():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--quick", action="store_true", help="three shapes only")
    harness.add_shapes_arguments(ap, "issue #12's sweep (--quick: three shapes)")
    ap.add_argument("--all-columns", action="store_true", help="also the swizzled policies")
    harness.add_peers_argument(ap, DEFAULT_PEERS)
    harness.add_timing_arguments(ap)
    ap.add_argument("--num-xcds", type=int, default=8,
                    help="domains the swizzled policies assume (8 = MI300X; NVIDIA dispatch is not round-robin)")
    ap.add_argument("--plot", action="store_true")
    return ap


def runs(args):
    return harness.shape_runs(args, QUICK if args.quick else SWEEP)


def main(argv=None):
    args = parser().parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("bench/fwd.py needs a CUDA or ROCm device")
    mappings = MAPPINGS if args.all_columns else DEFAULT_MAPPINGS
    result = harness.result_header("fwd")
    with harness.ClockLog(period_ms=50) as clocks:  # a column's 300 ms timing: ~6 samples
        rows = measure(runs(args), mappings, args)
    harness.column_clocks(rows, clocks)
    md = harness.save_results(args.out, dict(result, rows=rows), markdown)
    if args.plot:
        plot(rows, args.out / f"{harness.file_stem(result)}.png")
    print(md)


if __name__ == "__main__":
    main()
