"""Two probes of how a forward call's time is read, for chiplet_fa's forward (head_first, or the
mappings given) and cuDNN's, each in one process (docs/benchmarking.md, "Timing at the power cap"):

1. method: each call timed by fwd.py's method (each CUDA-graph replay between events, the host
   synchronising after each; `synced`) and by replays back to back (events around a run of
   them; `back-to-back`), alternating, for --rounds rounds.
2. placement (--copies N): the same inputs copied into N fresh allocations (other physical pages),
   each timed the synced way, then again in reverse order: whether a kernel's time depends on
   where its inputs lie. Across processes head_first at H=32 N=8K D=128 read 574-719 TFLOP/s
   where cuDNN read 593-642.

  python tools/probes/timing_probe.py --shapes 1,32,32,8192,128,noncausal 8,16,16,2048,64,causal --copies 4
  python tools/probes/timing_probe.py --shapes 1,32,32,8192,128,noncausal --rounds 0 --copies 4 \
      --mappings head_first swizzled_head_first --num-xcds 4
Prints one line per round or copy (and with --out writes them to OUT/timing_probe.txt); GPU only.
Shapes: bench/harness.py's grammar.
"""
import argparse
import contextlib
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import harness  # noqa: E402

import chiplet_fa  # noqa: E402,F401  (registers torch.ops.chiplet_fa)


def back_to_back_ms(timer, reps=20):
    """Milliseconds a call over reps replays (or calls) issued back to back."""
    run = timer.graph.replay if timer.graph is not None else timer.fn
    run()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        run()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / reps / timer.calls


def calls(q, k, v, causal, num_xcds, mappings=("head_first",)):
    """{name: fn}: chiplet_fa under each mapping and cuDNN on these tensors ((B, N, H, D), K/V
    expanded for SDPA)."""
    views = harness.sdpa_views(q, k, v, expand_kv=True)
    fns = {m: (lambda m=m: torch.ops.chiplet_fa.fwd(q, k, v, None, causal, m, num_xcds)) for m in mappings}
    fns["cudnn"] = lambda: harness.sdpa("sdpa_cudnn", *views, causal)
    return fns


def timed(fns, fn_ms):
    """{name: milliseconds a call} of each fn, timed by fn_ms(timer)."""
    ms = {}
    for name, fn in fns.items():
        with harness.Timer(fn, True) as t:
            ms[name] = fn_ms(t)
    return ms


def probe(run, args, say):
    """Both probes for one run (B, H_q, H_kv, N, D, causal), each line to say()."""
    b, hq, hkv, n, d, causal = run
    s = f"{b},{hq},{hkv},{n},{d},{'causal' if causal else 'noncausal'}"
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16, generator=gen) for h in (hq, hkv, hkv))
    flops = harness.attention_flops(b, hq, n, n, d, causal)
    fns = calls(q, k, v, causal, args.num_xcds, args.mappings) if args.rounds > 0 else {}
    timers = {}
    try:
        for name, fn in fns.items():
            timers[name] = harness.Timer(fn, True)
        for r in range(args.rounds):
            row = [f"{name}: synced {t.ms(300) * 1e3:.1f} us, back-to-back {back_to_back_ms(t) * 1e3:.1f} us, "
                   f"{t.calls} calls a graph" for name, t in timers.items()]
            say(f"{s} method round {r}: " + " | ".join(row))
    finally:
        for t in timers.values():
            t.close()
    readings = {}
    kept = []  # every copy stays allocated: a freed one's blocks would serve the next
    # Two passes, the second in reverse order: a copy that reads slow in both is its placement,
    # one that reads slow only in its place in the run is the clock.
    order = list(range(args.copies)) + list(reversed(range(args.copies)))
    for n, i in enumerate(order):
        if i == len(kept):
            kept.append([t.clone() for t in (q, k, v)])
        ms = timed(calls(*kept[i], causal, args.num_xcds, args.mappings), lambda t: t.ms(300))
        say(f"{s} copy {i}{' again' if n >= args.copies else ''}: "
            + " | ".join(f"{name} {m * 1e3:.1f} us ({flops / m / 1e9:.0f})" for name, m in ms.items()))
        for name, m in ms.items():
            readings.setdefault(name, []).append(m * 1e3)
    for name, us in readings.items():
        if len(us) > 1:
            say(f"{s} {name} over {len(us)} readings of {args.copies} copies: {min(us):.1f}-{max(us):.1f} us, "
                f"spread {max(us) / min(us) - 1:.1%}, median {statistics.median(us):.1f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    harness.add_shapes_arguments(ap, "-", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--copies", type=int, default=0)
    ap.add_argument("--num-xcds", type=int, default=8,
                    help="as bench/fwd.py passes (the domains a swizzled mapping splits the heads over)")
    ap.add_argument("--out", type=Path, help="also write the lines to OUT/timing_probe.txt (tools/device/ab_run.sh "
                                             "passes one)")
    ap.add_argument("--mappings", nargs="+", default=["head_first"],
                    choices=("block_first", "head_first", "swizzled_block_first", "swizzled_head_first"),
                    help="e.g. swizzled_head_first with --num-xcds 4: four queues, each walking its quarter "
                         "of the heads, so more heads are read at once than under head_first")
    args = ap.parse_args()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "timing_probe.txt", "a") if args.out else contextlib.nullcontext() as log:
        def say(line):
            print(line, flush=True)
            if log:
                print(line, file=log, flush=True)

        for run in harness.shape_runs(args):
            probe(run, args, say)


if __name__ == "__main__":
    main()
