"""`chiplet-fa simulate`: predicted L2 hit rate and DRAM traffic per mapping on a GPU preset,
optionally over a sequence-length sweep drawn as the paper's Figure 13."""
import argparse
import json
import sys
from typing import List, Tuple

from .model import MAPPINGS, Shape, estimate, preset, presets, simulate


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register the `simulate` subcommand on an argparse subparsers object."""
    p = subparsers.add_parser(
        "simulate", help="predict L2 hit rate and DRAM traffic per mapping (L2 locality model)",
        description="Replay the FA2 forward's K/V tile reads through the L2 caches of a GPU preset "
                    "for every workgroup mapping, next to the closed-form estimate.")
    p.add_argument("--gpu", default="mi300x", choices=sorted(presets()), help="topology preset")
    p.add_argument("--batch", type=int, default=None, help="sequences (default 1, or as many as --seqlens)")
    p.add_argument("--heads", type=int, default=128, help="query heads")
    p.add_argument("--kv-heads", type=int, default=None, help="K/V heads (GQA); default: --heads")
    p.add_argument("--seqlen", type=int, default=131072, help="sequence length (largest of a sweep)")
    p.add_argument("--seqlens", type=_lengths, metavar="N,N,...",
                   help="a packed (variable-length) batch: the length of each sequence, e.g. 4096,512,9000 "
                        "(replaces --seqlen; 0 is an empty sequence)")
    p.add_argument("--seqlens-k", type=_lengths, metavar="N,N,...",
                   help="key lengths of the packed batch (default: --seqlens)")
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--elem-bytes", type=int, default=2, help="2 for fp16/bf16")
    p.add_argument("--causal", action="store_true")
    p.add_argument("--mappings", nargs="+", default=list(MAPPINGS), choices=MAPPINGS)
    p.add_argument("--mapping-xcds", type=int, default=-1,
                   help="XCD count the mapping assumes (default: the preset's domains)")
    p.add_argument("--wgs-per-cu", type=int, default=None, help="override the preset's occupancy")
    p.add_argument("--stagger", type=float, default=None, help="override the preset's stagger_steps")
    p.add_argument("--sweep", action="store_true",
                   help="also every power of two from 2048 up to --seqlen (implied by --plot)")
    p.add_argument("--estimate-only", action="store_true", help="skip the simulator")
    p.add_argument("--plot", metavar="PNG", help="draw hit rate vs sequence length (needs matplotlib)")
    p.add_argument("--json", metavar="FILE", help="write the rows as JSON")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run)
    return p


def _lengths(text: str) -> Tuple[int, ...]:
    try:
        lens = tuple(int(n) for n in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated lengths like 4096,512,9000, got {text!r}")
    if any(n < 0 for n in lens):
        raise argparse.ArgumentTypeError(f"lengths must be >= 0, got {text!r}")
    return lens


def _check_packed(args) -> None:
    """--seqlens describes one packed batch: no sweep, and --batch (if given) must count it.
    Sets args.batch (default 1, or the sequences of --seqlens)."""
    if args.seqlens is None:
        if args.seqlens_k is not None:
            raise SystemExit("chiplet-fa simulate: --seqlens-k needs --seqlens")
        args.batch = 1 if args.batch is None else args.batch
        return
    if args.sweep or args.plot:
        raise SystemExit("chiplet-fa simulate: --seqlens gives one packed batch; --sweep and --plot sweep --seqlen")
    if args.batch is not None and args.batch != len(args.seqlens):
        raise SystemExit(f"chiplet-fa simulate: --batch {args.batch} but --seqlens has {len(args.seqlens)} entries")
    if args.seqlens_k is not None and len(args.seqlens_k) != len(args.seqlens):
        raise SystemExit(f"chiplet-fa simulate: --seqlens-k has {len(args.seqlens_k)} entries, "
                         f"--seqlens {len(args.seqlens)}")
    args.batch = len(args.seqlens)


def _shape(args, n: int) -> Shape:
    common = dict(num_q_heads=args.heads, head_dim=args.head_dim, num_kv_heads=args.kv_heads,
                  elem_bytes=args.elem_bytes, causal=args.causal)
    if args.seqlens is not None:
        return Shape(batch=len(args.seqlens), seqlens_q=args.seqlens, seqlens_k=args.seqlens_k, **common)
    return Shape(batch=args.batch, seqlen_q=n, **common)


def _seqlens(args) -> List[int]:
    if args.seqlens is not None:
        return [max(args.seqlens)]
    if not (args.sweep or args.plot):
        return [args.seqlen]
    lens, n = [], 2048
    while n < args.seqlen:
        lens.append(n)
        n *= 2
    return lens + [args.seqlen]


class _Progress:
    """On a terminal: tqdm when installed, else a one-line text bar, each redrawn with carriage
    returns. Elsewhere (a pipe, a log file), where those would pile up: a plain line per finished run."""

    def __init__(self, total: int, enabled: bool, stream=None):
        self.stream = sys.stderr if stream is None else stream
        self.total, self.enabled, self.base = total, enabled, 0.0
        self.live = enabled and self.stream.isatty()
        self.bar = None
        if self.live:
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=total, desc="simulate", unit="run", file=self.stream,
                                bar_format="{l_bar}{bar}| {n:.1f}/{total} runs [{elapsed}<{remaining}]")
            except ImportError:
                pass

    def update(self, done: int, total: int) -> None:
        if not self.live:
            return
        value = min(self.total, self.base + (done / total if total else 0.0))
        if self.bar is not None:
            self.bar.n = value
            self.bar.refresh()
        else:
            width = 40
            filled = int(width * value / self.total)
            print(f"\rsimulate [{'#' * filled}{'.' * (width - filled)}] {value:5.1f}/{self.total}",
                  end="", file=self.stream, flush=True)

    def next_run(self) -> None:
        self.base += 1
        if self.live:
            self.update(0, 0)
        elif self.enabled:
            print(f"simulate: {int(self.base)}/{self.total} runs done", file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.live:
            print(file=self.stream)


def run(args) -> int:
    topo = preset(args.gpu)
    if args.wgs_per_cu is not None:
        topo.wgs_per_cu = args.wgs_per_cu
    if args.stagger is not None:
        topo.stagger_steps = args.stagger
    _check_packed(args)
    lens = _seqlens(args)
    runs = 0 if args.estimate_only else len(lens) * len(args.mappings)
    progress = _Progress(runs, enabled=runs > 0 and not args.no_progress)
    rows = []
    try:
        for n in lens:
            shape = _shape(args, n)
            for m in args.mappings:
                est = estimate(topo, shape, m, args.mapping_xcds)
                row = {"seqlen": n, "mapping": m, "est_hit_rate": est.hit_rate,
                       "est_dram_read_bytes": est.dram_read_bytes}
                if shape.packed:
                    row.update(seqlens_q=list(shape.seqlens_q), seqlens_k=list(shape.kwargs()["seqlens_k"]))
                if not args.estimate_only:
                    sim = simulate(topo, shape, m, args.mapping_xcds, progress=progress.update)
                    progress.next_run()
                    row.update(sim_hit_rate=sim.hit_rate, sim_kv_hit_rate=sim.kv_hit_rate,
                               sim_dram_read_bytes=sim.dram_read_bytes)
                rows.append(row)
    finally:
        progress.close()
    print(format_table(topo, args, rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"topology": repr(topo), "rows": rows}, f, indent=1)
    if args.plot:
        plot(topo, args, rows, args.plot)
        print(f"wrote {args.plot}")
    return 0


def format_table(topo, args, rows) -> str:
    kv = args.kv_heads or args.heads
    if args.seqlens is not None:
        keys = "" if args.seqlens_k is None else f" N_k={','.join(map(str, args.seqlens_k))}"
        batch = f"packed B={len(args.seqlens)} N_q={','.join(map(str, args.seqlens))}{keys}"
    else:
        batch = f"B={args.batch}"
    head = (f"{topo!r}\n{batch} H_q={args.heads} H_kv={kv} D={args.head_dim} "
            f"causal={args.causal} BLOCK_M=128 BLOCK_N=64 (L2 hit rate: all L2 traffic, as Nsight)")
    sim = "sim_hit_rate" in rows[0] if rows else False
    cols = f"{'seqlen':>8}  {'mapping':<22}" + (f"{'sim hit':>9}{'sim DRAM':>12}" if sim else "") + \
        f"{'est hit':>9}{'est DRAM':>12}"
    lines = [head, cols]
    for r in rows:
        line = f"{r['seqlen']:>8}  {r['mapping']:<22}"
        if sim:
            line += f"{100 * r['sim_hit_rate']:8.1f}%{r['sim_dram_read_bytes'] / 1e9:9.2f} GB"
        line += f"{100 * r['est_hit_rate']:8.1f}%{r['est_dram_read_bytes'] / 1e9:9.2f} GB"
        lines.append(line)
    return "\n".join(lines)


def plot(topo, args, rows, path: str) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise SystemExit("--plot needs matplotlib: pip install matplotlib") from exc
    key = "sim_hit_rate" if rows and "sim_hit_rate" in rows[0] else "est_hit_rate"
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for m in args.mappings:
        pts = [(r["seqlen"], 100 * r[key]) for r in rows if r["mapping"] == m]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o" if "swizzled" in m else "s",
                linestyle="-" if "swizzled" in m else "--", label=m)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({r["seqlen"] for r in rows}))
    ax.set_xticklabels([f"{n // 1024}K" for n in sorted({r["seqlen"] for r in rows})])
    ax.set_ylim(0, 100)
    ax.set_xlabel("sequence length")
    ax.set_ylabel("L2 hit rate (%)")
    kv = args.kv_heads or args.heads
    ax.set_title(f"{topo.name}: B={args.batch} H_q={args.heads} H_kv={kv} D={args.head_dim}"
                 f"{' causal' if args.causal else ''} ({'simulated' if key.startswith('sim') else 'closed form'})")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    """Standalone entry (python -m chiplet_fa.locality.cli simulate ...)."""
    parser = argparse.ArgumentParser(prog="chiplet-fa")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
