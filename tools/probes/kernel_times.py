"""GPU time per kernel of one call, chiplet_fa's and cuDNN's (torch.profiler): where a call's time
goes besides its main kernel (fills, the backward's preprocess and dQ conversion, copies), which
the TFLOP/s tables of bwd.py and fwd.py cannot say.

  python tools/probes/kernel_times.py --shapes 8,16,16,2048,64,causal --out /tmp/r
  python tools/probes/kernel_times.py --shapes 8,16,16,2048,64,causal --graph --settle-ms 1000 \
      --mappings head_first block_first --direction fwd --out /tmp/r
Writes kernel_times_<gpu>.json and kernel_times.md: for each shape and call, each kernel's mean time per call
and its share of the call's summed kernel time. Shapes: bench/harness.py's grammar. Eager by default
(each call launched from the host); --graph profiles replays of a CUDA graph of the calls
(bench/harness.py's capture, as fwd.py and bwd.py time them), back to back after --settle-ms of untimed replays, and adds the span a call
takes from its first kernel's start to the next call's (kernels and the gaps between them): where
fwd.py's TFLOP/s and the eager kernel times disagree, it says whether the kernel or what lies
between kernels takes the difference.
"""
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import harness  # noqa: E402

import chiplet_fa  # noqa: E402,F401  (registers the operators)

CALLS = 20


def per_call(kernels, calls):
    """kernels: (name, start us, end us) of `calls` calls run back to back. Returns ({kernel name:
    mean us per call}, the mean span of a call: first start to last end over all of them, / calls)."""
    if not kernels:
        raise RuntimeError("the profiler recorded no GPU kernel")
    total = defaultdict(float)
    for name, start, end in kernels:
        total[name] += end - start
    span = max(end for _, _, end in kernels) - min(start for _, start, _ in kernels)
    return {name: us / calls for name, us in total.items()}, span / calls


def profiled_kernels(run, runs, windows):
    """(name, start us, end us) of every GPU kernel of `runs` runs of `run`; appends the runs'
    wall-clock window (time.time()) to `windows`."""
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        t0 = time.time()
        for _ in range(runs):
            run()
        torch.cuda.synchronize()
        windows.append((t0, time.time()))
    return [(e.name, e.time_range.start, e.time_range.end) for e in prof.events()
            if e.device_type == torch.autograd.DeviceType.CUDA]


def kernel_times(fn, graph=False, settle_ms=0.0, windows=None):
    """per_call() of fn: CALLS eager calls after a warm-up, or (graph) replays of a CUDA graph of
    calls, at least CALLS calls, after settle_ms of untimed replays. The profiled calls' wall-clock
    window is appended to `windows`."""
    windows = [] if windows is None else windows
    if graph:
        with harness.Timer(fn, graph=True) as timer:
            if timer.graph is not None:  # None: a call too long to capture, or one that cannot be
                if settle_ms > 0:
                    timer.ms(0.0, min_reps=1, settle_ms=settle_ms)
                replays = -(-CALLS // timer.calls)
                return per_call(profiled_kernels(timer.graph.replay, replays, windows), replays * timer.calls)
    fn()
    torch.cuda.synchronize()
    return per_call(profiled_kernels(fn, CALLS, windows), CALLS)


def calls(b, hq, hkv, n, d, causal, mappings, direction="both"):
    """{call name: fn} of one shape: ours under each mapping and cuDNN's, forward and/or backward
    (only what `direction` asks for is set up: the backward's kept forwards cost memory)."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16, generator=gen) for h in (hq, hkv, hkv))
    ops = torch.ops.chiplet_fa
    leaves = [t.detach().requires_grad_() for t in harness.sdpa_views(q, k, v)]
    # head_first's calls keep their plain names (the earlier tables'); other mappings' are tagged.
    tag = {m: "" if m == "head_first" else f" {m}" for m in mappings}
    fns = {}
    if direction in ("fwd", "both"):
        def cudnn_fwd():
            with torch.no_grad():
                harness.sdpa("sdpa_cudnn", *leaves, causal)

        for m in mappings:
            fns["fwd" + tag[m]] = lambda m=m: ops.fwd(q, k, v, None, causal, m, -1)
        fns["cudnn fwd"] = cudnn_fwd
    if direction in ("bwd", "both"):
        dout = torch.randn_like(q)
        out, lse = ops.fwd(q, k, v, None, causal, "head_first", -1)
        ref = harness.sdpa("sdpa_cudnn", *leaves, causal)
        for m in mappings:
            fns["bwd" + tag[m]] = lambda m=m: ops.bwd(dout, q, k, v, out, lse, None, causal, m, -1, False)
            fns["bwd det" + tag[m]] = lambda m=m: ops.bwd(dout, q, k, v, out, lse, None, causal, m, -1, True)
        fns["cudnn bwd"] = lambda: torch.autograd.grad(ref, leaves, dout.transpose(1, 2), retain_graph=True)
    if direction == "both":  # bwd.py's forward+backward: which kernel slows when the two run as one call
        def cudnn_fwd_bwd():
            return torch.autograd.grad(harness.sdpa("sdpa_cudnn", *leaves, causal), leaves, dout.transpose(1, 2))

        for m in mappings:
            fns["fwd+bwd" + tag[m]] = lambda m=m: ops.bwd(dout, q, k, v, *ops.fwd(q, k, v, None, causal, m, -1),
                                                          None, causal, m, -1, False)
        fns["cudnn fwd+bwd"] = cudnn_fwd_bwd
    return fns


def markdown(result):
    """A table per (shape, call): each kernel's time and share, the call's span and SM clock."""
    how = "CUDA-graph replays, back to back" if result["rows"] and result["rows"][0]["graph"] else "eager calls"
    lines = [f"# GPU time per kernel of one call ({result['gpu']}, {how})", "", *harness.header_lines(result)]
    calls = {}
    for r in result["rows"]:
        calls.setdefault(tuple(r[k] for k in ("B", "H_q", "H_kv", "N", "D", "causal", "call")), []).append(r)
    for (b, hq, hkv, n, d, causal, call), kernels in calls.items():
        total, first = sum(r["us"] for r in kernels), kernels[0]
        at = (f"; SM clock {first['sm_mhz']:.0f} MHz, {first['watts']:.0f} W" if first["sm_mhz"] is not None else "")
        lines += [f"{b}x{hq}/{hkv} N={n} D={d} causal={causal} {call}: {total:.1f} us of kernels a call, "
                  f"{first['span_us']:.1f} us a call from one call's first kernel to the next's{at}", "",
                  "| kernel | us | share |", "|---|---|---|"]
        lines += [f"| `{r['kernel'][:110]}` | {r['us']:.1f} | {r['us'] / total:.1%} |" for r in kernels]
        lines.append("")
    return "\n".join(lines)


def main():
    def extra(ap):
        harness.add_shapes_arguments(ap, "-", required=True)
        ap.add_argument("--mappings", nargs="+", default=["head_first"],
                        choices=("block_first", "head_first", "swizzled_block_first", "swizzled_head_first"))
        ap.add_argument("--direction", choices=("fwd", "bwd", "both"), default="both",
                        help="only the forward calls (ours under each mapping, cuDNN's), only the backward ones, "
                             "or both and forward+backward as one call")
        ap.add_argument("--graph", action="store_true", help="profile CUDA-graph replays, back to back (see above)")
        ap.add_argument("--settle-ms", type=float, default=0.0, help="with --graph: untimed replays first")

    args = harness.gpu_bench_args(__doc__, extra=extra)
    result = harness.result_header("kernel_times")
    measured, windows = [], []
    with harness.ClockLog() as clocks:
        for run in harness.shape_runs(args):
            for call, fn in calls(*run, args.mappings, args.direction).items():
                times, span = kernel_times(fn, args.graph, args.settle_ms, windows)
                measured.append(((*run, call), times, span))
    rows = []
    for ((b, hq, hkv, n, d, causal, call), times, span), window in zip(measured, windows):
        clock = clocks.window([window])
        rows += [{"B": b, "H_q": hq, "H_kv": hkv, "N": n, "D": d, "causal": causal, "call": call, "kernel": name,
                  "us": us, "span_us": span, "graph": args.graph, "sm_mhz": clock[0] if clock else None,
                  "watts": clock[1] if clock else None}
                 for name, us in sorted(times.items(), key=lambda x: -x[1])]
    print(harness.save_results(args.out, dict(result, rows=rows), markdown))


if __name__ == "__main__":
    main()
