"""Forward TFLOP/s of chiplet_fa per mapping against torch SDPA backends, one process.

  python bench/fwd.py --out bench/results            # issue #12's sweep against SDPA (H200: ~2 min)
  python bench/fwd.py --quick --out /tmp/r            # three shapes, for iterating
  python bench/fwd.py --shapes 8,16,16,2048,64 --causal yes --out /tmp/r   # chosen shapes
  python bench/fwd.py --settle-ms 1500 --peers sdpa_cudnn --out /tmp/r   # the settled issue table
Writes fwd_<gpu>.md and fwd_<gpu>.json; --plot draws TFLOP/s per mapping (needs matplotlib).
"""
import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from clock_log import ClockLog, clock_pair, column_clocks  # noqa: E402
from timing import (add_timing_argument, attention_flops, fmt, save_results, time_in_turns,  # noqa: E402
                    timing_note, timing_options)

import chiplet_fa  # noqa: E402

try:  # a progress bar where tqdm is installed (it is on the H200 image), plain lines otherwise
    from tqdm import tqdm
except ImportError:
    tqdm = None

MAPPINGS = ("block_first", "head_first", "swizzled_block_first", "swizzled_head_first")
SDPA = {"sdpa_flash": SDPBackend.FLASH_ATTENTION, "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
        "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION}
BOTH, CAUSAL = (False, True), (True,)
# ((B, H_q, H_kv, N, D), causal values): issue #12's points. D=128 at H 32, 128 and GQA 64/8 over
# N 8K-64K; D=56 (DeepSeek-V3), 64 and 256; the two small causal shapes.
SWEEP = ([((1, h, kv, n, 128), BOTH) for h, kv in ((32, 32), (128, 128), (64, 8))
          for n in (8192, 16384, 32768, 65536)]
         + [((1, 128, 128, n, 56), BOTH) for n in (8192, 32768)]
         + [((1, 64, 64, 16384, 64), BOTH), ((1, 16, 16, 16384, 256), BOTH)]
         + [((8, 16, 16, 2048, 64), CAUSAL), ((4, 32, 8, 4096, 128), CAUSAL)])
QUICK = [((1, 128, 128, 8192, 128), BOTH), ((1, 64, 8, 8192, 128), CAUSAL), ((1, 128, 128, 8192, 64), (False,))]
# The default columns; --all-columns adds the swizzled policies (which assume 8 XCDs: no better than
# head_first on a one-L2 GPU) and SDPA's memory-efficient backend (about a third of the others).
COLUMNS = ("block_first", "head_first", "sdpa_flash", "sdpa_cudnn")
RATIOS = (("block_first", "block_first"), ("sdpa_flash", "flash"), ("sdpa_cudnn", "cuDNN"))


def run_shape(b, hq, hkv, n, d, causal, num_xcds, columns, timing):
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(b, n, hq, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    k = torch.randn(b, n, hkv, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    v = torch.randn(b, n, hkv, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    flops = attention_flops(b, hq, n, n, d, causal)
    row = {"B": b, "H_q": hq, "H_kv": hkv, "N": n, "D": d, "causal": causal, "timing": timing_note(**timing)}
    fns = {m: (lambda m=m: torch.ops.chiplet_fa.fwd(q, k, v, None, causal, m, num_xcds))
           for m in MAPPINGS if m in columns}
    # SDPA gets K/V expanded to every query head before timing (its GQA path would expand inside).
    kx, vx = (t if hq == hkv else t.repeat_interleave(hq // hkv, 2) for t in (k, v))
    qt, kt, vt = (t.transpose(1, 2) for t in (q, kx, vx))

    def sdpa(backend):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)

    for name, backend in SDPA.items():
        if name in columns:
            try:
                sdpa(backend)
                fns[name] = lambda b=backend: sdpa(b)
            except RuntimeError:  # backend does not support this shape
                fns[name] = None
    windows = {}
    for name, ms in time_in_turns(fns, **timing, windows=windows).items():
        row[name] = None if ms is None else flops / ms / 1e9
    row["windows"] = windows  # column_clocks turns them into each column's SM clock
    return row


def markdown(rows, gpu, command):
    cols = [c for c in list(MAPPINGS) + list(SDPA) if c in rows[0]]
    peers = [(c, name) for c, name in RATIOS if c in rows[0]]  # the ratio columns of the peers that ran
    clocks = "head_first_mhz" in rows[0] and "sdpa_cudnn_mhz" in rows[0]
    lines = [f"# chiplet_fa forward, {gpu}, bf16 (TFLOP/s, median {rows[0]['timing']}; causal FLOPs halved)", "",
             f"Command: `{command}`", "",
             "| B | H_q | H_kv | N | D | causal | " + " | ".join(cols) + " | "
             + " | ".join(f"head_first / {name}" for _, name in peers)
             + (" | SM MHz head_first / cuDNN" if clocks else "") + " |",
             "|" + "---|" * (6 + len(cols) + len(peers) + clocks)]
    for r in rows:
        ratio = lambda key: "n/a" if not r.get(key) else f"{r['head_first'] / r[key]:.2f}"  # noqa: E731
        lines.append(f"| {r['B']} | {r['H_q']} | {r['H_kv']} | {r['N']} | {r['D']} | "
                     f"{'yes' if r['causal'] else 'no'} | " + " | ".join(fmt(r[c]) for c in cols)
                     + " | " + " | ".join(ratio(c) for c, _ in peers)
                     + (f" | {clock_pair(r, 'head_first', 'sdpa_cudnn')}" if clocks else "") + " |")
    return "\n".join(lines) + "\n"


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = [f"{r['B']}x{r['H_q']}/{r['H_kv']}\nN={r['N'] // 1024}K d{r['D']}{' c' if r['causal'] else ''}"
              for r in rows]
    fig, ax = plt.subplots(figsize=(max(8, len(rows) * 0.9), 4.5))
    cols = [c for c in list(MAPPINGS) + list(SDPA) if c in rows[0]]
    width = 0.8 / len(cols)
    for i, c in enumerate(cols):
        ax.bar([x + i * width for x in range(len(rows))], [r[c] or 0 for r in rows], width, label=c)
    ax.set_xticks([x + 0.4 for x in range(len(rows))], labels, fontsize=7)
    ax.set_ylabel("TFLOP/s")
    ax.legend(fontsize=7, ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def measure(shapes, columns, args):
    """One row a (shape, causal), a progress line each."""
    rows = []
    bar = tqdm(total=len(shapes), unit="shape") if tqdm else None
    for i, (shape, causal) in enumerate(shapes):
        rows.append(run_shape(*shape, causal, args.num_xcds, columns, timing_options(args)))
        r = rows[-1]
        line = (f"{shape} causal={causal}: head_first {r['head_first']:.0f}, block_first "
                f"{fmt(r.get('block_first'))}, flash {fmt(r.get('sdpa_flash'))}, cudnn {fmt(r.get('sdpa_cudnn'))}")
        if bar:
            bar.set_postfix_str(line)
            bar.update()
        else:
            print(f"[{i + 1}/{len(shapes)}] {line}", flush=True)
        torch.cuda.empty_cache()
    if bar:
        bar.close()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--quick", action="store_true", help="three shapes only")
    ap.add_argument("--causal", choices=["both", "yes", "no"], default="both",
                    help="restrict the sweep's causal values (the small shapes are causal only)")
    ap.add_argument("--all-columns", action="store_true",
                    help="also the swizzled policies and SDPA's memory-efficient backend")
    ap.add_argument("--peers", nargs="+", choices=tuple(SDPA),
                    help="only these SDPA backends (default: flash and cuDNN; every one with --all-columns); "
                         "settled (--settle-ms 1500), a column takes ~2 s a shape")
    add_timing_argument(ap)
    ap.add_argument("--num-xcds", type=int, default=8,
                    help="domains the swizzled policies assume (8 = MI300X; NVIDIA dispatch is not round-robin)")
    ap.add_argument("--shapes", nargs="+", metavar="B,H_Q,H_KV,N,D",
                    help="these shapes instead of the sweep (each causal and not, as --causal allows)")
    ap.add_argument("--plot", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench/fwd.py needs a CUDA or ROCm device")
    allowed = {"both": (False, True), "yes": (True,), "no": (False,)}[args.causal]
    columns = tuple(MAPPINGS) + tuple(SDPA) if args.all_columns else COLUMNS
    if args.peers:
        columns = tuple(c for c in columns if c not in SDPA) + tuple(args.peers)
    sweep = QUICK if args.quick else SWEEP
    if args.shapes:
        sweep = [(tuple(int(x) for x in s.split(",")), BOTH) for s in args.shapes]
    shapes = [(s, c) for s, causals in sweep for c in causals if c in allowed]
    with ClockLog(period_ms=50) as clocks:  # a column's 300 ms timing: ~6 samples
        rows = measure(shapes, columns, args)
    column_clocks(rows, clocks)
    md, gpu = save_results(args.out, "fwd", rows, markdown)
    if args.plot:
        plot(rows, args.out / f"fwd_{gpu}.png")
    print(md)


if __name__ == "__main__":
    main()
