"""Backward and forward+backward TFLOP/s of chiplet_fa per mapping against torch SDPA flash and
cuDNN, one process.

  python bench/bwd.py --out bench/results            # paper shapes (H200: ~2-3 min)
  python bench/bwd.py --quick --out /tmp/r            # two shapes, for iterating
  python bench/bwd.py --wide --out /tmp/r             # head dims above 128 (D=192, 256)
  python bench/bwd.py --issue --mappings head_first --out /tmp/r   # issue #13's points (H200: ~3 min)
  python bench/bwd.py --shapes 4,32,8,4096,128 --causal yes --out /tmp/r   # chosen shapes (bench/harness.py)
  python bench/bwd.py --quick --mappings head_first --out /tmp/r   # head_first against SDPA only
  python bench/bwd.py --issue --mappings head_first --peers sdpa_cudnn --settle-ms 1500 --out /tmp/r
FLOPs: backward = 2.5x forward, forward+backward = 3.5x forward; causal FLOPs halved.
Writes bwd_<gpu>.json and generates bwd.md again (a section per bwd JSON in --out). chiplet_fa
backward times the bwd operator alone (given out and lse) with atomic dQ; the `det` column is
deterministic mode under head_first. SDPA backward times torch.autograd.grad over a retained graph.
"""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402
from harness import PEER_NAMES, Shape, fmt  # noqa: E402

import chiplet_fa  # noqa: E402,F401  (registers the operators)

MAPPINGS = ("block_first", "head_first", "swizzled_block_first", "swizzled_head_first")
PEERS = ("sdpa_flash", "sdpa_cudnn")
# The paper's shapes that fit the time budget (B 1..4, H 32/128, N 8K/32K, GQA 64/8); --full adds
# H=128 at 32K, which alone takes about a minute.
SWEEP = [Shape(1, 128, 128, 8192, 128), Shape(4, 32, 32, 8192, 128), Shape(1, 32, 32, 32768, 128),
         Shape(1, 64, 8, 32768, 128)]
FULL_EXTRA = [Shape(1, 128, 128, 32768, 128)]
QUICK = [Shape(1, 128, 128, 8192, 128), Shape(1, 64, 8, 8192, 128)]
WIDE = [Shape(1, 16, 16, 8192, 192), Shape(1, 16, 8, 8192, 256)]  # D=256: Gemma-2-9B's 16/8 heads
# Issue #13's "done when": D=128 at H 32, 128 and GQA 64/8 over N 8K-32K, the small causal shapes,
# then D=64/56/96 and the wide head dims (each causal and not, as --causal allows).
ISSUE = ([Shape(1, h, kv, n, 128) for h, kv in ((32, 32), (128, 128), (64, 8)) for n in (8192, 16384, 32768)]
         + [Shape(4, 32, 8, 4096, 128), Shape(8, 16, 16, 2048, 64)]
         + [Shape(1, 32, 32, 8192, d) for d in (64, 56, 96)] + WIDE)
BWD_FACTOR, FWD_BWD_FACTOR = 2.5, 3.5


def tflops(flops, ms):
    return None if ms is None else flops / ms / 1e9


def run_shape(b, hq, hkv, n, d, causal, num_xcds, mappings, timing, peers=PEERS):
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16, generator=gen)
               for h in (hq, hkv, hkv))
    dout = torch.randn(b, n, hq, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    fwd_flops = harness.attention_flops(b, hq, n, n, d, causal)
    row = {"B": b, "H_q": hq, "H_kv": hkv, "N": n, "D": d, "causal": causal, "timing": harness.timing_note(**timing)}
    ops = torch.ops.chiplet_fa

    def bwd(m, deterministic=False):
        out, lse = ops.fwd(q, k, v, None, causal, m, num_xcds)
        return lambda: ops.bwd(dout, q, k, v, out, lse, None, causal, m, num_xcds, deterministic)

    def fwd_bwd(m):
        out, lse = ops.fwd(q, k, v, None, causal, m, num_xcds)
        return ops.bwd(dout, q, k, v, out, lse, None, causal, m, num_xcds, False)

    fns = {}
    for m in mappings:
        fns[f"{m}_bwd"] = bwd(m)
        fns[f"{m}_fwdbwd"] = lambda m=m: fwd_bwd(m)
    fns["head_first_det_bwd"] = bwd("head_first", True)

    for name in peers:
        fns.update(peer_backward(name, q, k, v, dout, causal))
        if name == "fa4":
            fns.update(peer_backward(name, q, k, v, dout, causal, deterministic=True))
    windows = {}
    for key, ms in harness.time_in_turns(fns, **timing, windows=windows).items():
        row[key] = tflops((BWD_FACTOR if key.endswith("_bwd") else FWD_BWD_FACTOR) * fwd_flops, ms)
    row["windows"] = windows  # column_clocks turns them into each column's SM clock
    return row


def peer_backward(peer, q, k, v, dout, causal, deterministic=False):
    """{<peer>_bwd: the peer's backward over a kept forward graph, <peer>_fwdbwd: forward and backward},
    None where it refuses the shape or is not installed; deterministic (FA4's mode): <peer>_det_bwd alone.
    SDPA takes (B, H, N, D) views, FA4 chiplet_fa's layout."""
    names = (f"{peer}_det_bwd",) if deterministic else (f"{peer}_bwd", f"{peer}_fwdbwd")
    fa4 = harness.fa4() if peer == "fa4" else None
    if peer == "fa4" and fa4 is None:
        return dict.fromkeys(names)
    if fa4:
        leaves, grad_out, refusals = [t.detach().requires_grad_() for t in (q, k, v)], dout, Exception

        def fwd():
            return fa4.flash_attn_func(*leaves, causal=causal, deterministic=deterministic)[0]
    else:
        leaves, grad_out, refusals = [t.detach().requires_grad_() for t in harness.sdpa_views(q, k, v)], dout.transpose(1, 2), RuntimeError

        def fwd():
            return harness.sdpa(peer, *leaves, causal)
    try:
        kept = fwd()  # its graph kept for repeated backwards
    except refusals as e:
        harness.refused(peer, e)
        return dict.fromkeys(names)
    fns = {names[0]: harness.runs_or_none(lambda: torch.autograd.grad(kept, leaves, grad_out, retain_graph=True),
                                          refusals, peer)}
    if not deterministic:
        fns[names[1]] = lambda: torch.autograd.grad(fwd(), leaves, grad_out)
    return fns


def best_mapping(r, kind):
    return max((m for m in MAPPINGS if f"{m}_{kind}" in r), key=lambda m: r[f"{m}_{kind}"])


def det_ratio(r):
    """Our deterministic backward over FA4's deterministic mode."""
    return "n/a" if not r.get("fa4_det_bwd") else f"{r['head_first_det_bwd'] / r['fa4_det_bwd']:.2f}"


def markdown(result):
    rows = result["rows"]
    lines = [f"# chiplet_fa backward, {result['gpu']}, bf16 (TFLOP/s, median {rows[0]['timing']}; bwd = 2.5x fwd "
             "FLOPs, fwd+bwd = 3.5x; causal FLOPs halved)", "", *harness.header_lines(result)]
    for kind, title in (("bwd", "Backward"), ("fwdbwd", "Forward + backward")):
        cols = [f"{m}_{kind}" for m in MAPPINGS if f"{m}_{kind}" in rows[0]] + (["head_first_det_bwd"] if kind == "bwd" else [])
        peers = [(s, name) for s, name in PEER_NAMES.items() if f"{s}_{kind}" in rows[0]]  # the peers that ran
        cols += [f"{s}_{kind}" for s, _ in peers]
        det_peer = kind == "bwd" and "fa4_det_bwd" in rows[0]  # deterministic against deterministic
        cols += ["fa4_det_bwd"] if det_peer else []
        clocks = f"head_first_{kind}_mhz" in rows[0] and f"sdpa_cudnn_{kind}_mhz" in rows[0]
        lines += [f"## {title}", "",
                  "| B | H_q | H_kv | N | D | causal | " + " | ".join(c.removesuffix(f"_{kind}") for c in cols)
                  + "".join(f" | best / {name}" for _, name in peers) + (" | det / FA4 det" if det_peer else "")
                  + (" | SM MHz head_first / cuDNN" if clocks else "") + " |",
                  "|" + "---|" * (6 + len(cols) + len(peers) + det_peer + clocks)]
        for r in rows:
            best = r[f"{best_mapping(r, kind)}_{kind}"]
            ratio = lambda key: "n/a" if not r.get(key) else f"{best / r[key]:.2f}"  # noqa: E731
            lines.append(f"| {r['B']} | {r['H_q']} | {r['H_kv']} | {r['N']} | {r['D']} | "
                         f"{'yes' if r['causal'] else 'no'} | " + " | ".join(fmt(r[c]) for c in cols)
                         + "".join(f" | {ratio(f'{s}_{kind}')}" for s, _ in peers)
                         + (f" | {det_ratio(r)}" if det_peer else "")
                         + (f" | {harness.clock_pair(r, f'head_first_{kind}', f'sdpa_cudnn_{kind}')}" if clocks else "")
                         + " |")
        lines.append("")
    return "\n".join(lines)


def measure(runs, mappings, args):
    """One row a run, a progress line each."""
    rows = []
    # A side stream for SDPA's kept forwards and the captures of their backwards (harness.Timer).
    stream = torch.cuda.Stream()
    for i, (*shape, causal) in enumerate(runs):
        with torch.cuda.stream(stream):
            rows.append(run_shape(*shape, causal, args.num_xcds, mappings, harness.timing_options(args), args.peers))
        r = rows[-1]
        print(f"[{i + 1}/{len(runs)}] {tuple(shape)} causal={causal}: bwd "
              + ", ".join(f"{m} {r[f'{m}_bwd']:.0f}" for m in mappings)
              + f", det {r['head_first_det_bwd']:.0f}, "
              + ", ".join(f"{PEER_NAMES[p]} {fmt(r.get(f'{p}_bwd'))}" for p in args.peers)
              + f"; fwd+bwd head_first {fmt(r.get('head_first_fwdbwd'))}", flush=True)
        torch.cuda.empty_cache()
    return rows


def parser():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--quick", action="store_true", help="two 8K shapes only")
    ap.add_argument("--full", action="store_true", help="add H=128 at N=32K (about a minute more)")
    ap.add_argument("--wide", action="store_true", help="only head dims above 128: D=192 and 256 at N=8K")
    ap.add_argument("--issue", action="store_true", help="issue #13's points: the 16 shapes of its tables")
    harness.add_shapes_arguments(ap, "the paper's shapes (or --quick, --wide, --issue)")
    harness.add_timing_arguments(ap)
    ap.add_argument("--num-xcds", type=int, default=8,
                    help="domains the swizzled policies assume (8 = MI300X; NVIDIA dispatch is not round-robin)")
    ap.add_argument("--mappings", nargs="+", choices=MAPPINGS, default=list(MAPPINGS),
                    help="time only these (head_first is always timed: the det column and the ratios use it)")
    harness.add_peers_argument(ap, PEERS, choices=(*PEERS, "fa4"))
    return ap


def runs(args):
    return harness.shape_runs(args, QUICK if args.quick else WIDE if args.wide else ISSUE if args.issue
                              else SWEEP + (FULL_EXTRA if args.full else []))


def main(argv=None):
    args = parser().parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("bench/bwd.py needs a CUDA or ROCm device")
    mappings = tuple(m for m in MAPPINGS if m in args.mappings or m == "head_first")
    result = harness.result_header("bwd")
    with harness.ClockLog(period_ms=50) as clocks:  # a column's 300 ms timing: ~6 samples
        rows = measure(runs(args), mappings, args)
    harness.column_clocks(rows, clocks)
    print(harness.save_results(args.out, dict(result, rows=rows), markdown))


if __name__ == "__main__":
    main()
