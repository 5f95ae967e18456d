"""Shared by the benchmarks: device timing (CUDA events, warm-up, median of repeats; wall clock
where there is no GPU, for CPU smoke runs), FLOP counts and writing a result table."""
import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch


def time_ms(fn, min_total_ms: float = 300.0, max_reps: int = 50, graph: bool = False) -> float:
    """Median milliseconds of fn() after one warm-up, repeating until min_total_ms elapses (CUDA
    events on a GPU, the wall clock without one). With graph=True (GPU only) a call shorter than
    GRAPH_MIN_MS is captured in a CUDA graph and the graph's replays are timed: a call of tens of
    microseconds is then timed without the host's launch work, which otherwise moves it by ~10%
    between repeats. Longer calls hide that work and are timed singly."""
    gpu = torch.cuda.is_available()
    fn()
    if gpu:
        torch.cuda.synchronize()
    if gpu and graph:
        first = _median_ms(fn, True, 0.0, 1)
        if first < GRAPH_MIN_MS:
            try:
                return _graph_ms(fn, first, min_total_ms, max_reps)
            except RuntimeError as err:  # a call that cannot be captured: say so, time it singly
                torch.cuda.synchronize()
                print(f"time_ms: CUDA-graph capture failed, timed as single calls: {err}",
                      file=sys.stderr, flush=True)
    return _median_ms(fn, gpu, min_total_ms, max_reps)


def add_timing_argument(ap):
    """--timing, time_ms's graph argument as `args.timing == "graph"`."""
    ap.add_argument("--timing", choices=["graph", "eager"], default="graph",
                    help=f"graph: calls under {GRAPH_MIN_MS:g} ms timed as replays of a CUDA graph of "
                         "them (no launch work), longer ones singly; eager: every call singly between "
                         "events (with the host's launch work)")


def _median_ms(fn, gpu, min_total_ms, max_reps, calls=1):
    times = []
    while len(times) < max_reps and (len(times) < 3 or sum(times) < min_total_ms):
        if not gpu:
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1e3)
            continue
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times) / calls


# A call or a replay of at least this long hides the host's launch work.
GRAPH_MIN_MS = 2.0
# How a table names the timing (time_ms's graph argument).
TIMING = {True: f"of CUDA-graph replays below {GRAPH_MIN_MS:g} ms a call, of single calls above",
          False: "of single calls"}


def _graph_ms(fn, eager_ms, min_total_ms, max_reps):
    """Milliseconds per call of fn from replays of one graph holding enough calls (eager_ms each)
    to fill GRAPH_MIN_MS. The capture runs on the current stream unless that is the default one
    (which cannot be captured): autograd runs a backward on its forward's stream, so a benchmark
    that keeps a forward for repeated backwards makes it on a side stream of its own, and the
    capture follows it there. The graph's private memory pool is freed before returning."""
    calls = max(1, min(256, math.ceil(GRAPH_MIN_MS / max(eager_ms, 1e-3))))
    current = torch.cuda.current_stream()
    stream = current if current != torch.cuda.default_stream() else torch.cuda.Stream()
    stream.wait_stream(current)
    with torch.cuda.stream(stream):  # first-call work (workspaces, plans) stays out of the capture
        fn()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        for _ in range(calls):
            fn()
    current.wait_stream(stream)
    g.replay()
    ms = _median_ms(g.replay, True, min_total_ms, max_reps, calls)
    del g
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return ms


def attention_flops(batch, heads, seqlen_q, seqlen_k, head_dim, causal):
    """Forward FLOPs (two matmuls); causal counts half, as the anchors and flash-attention do."""
    flops = 4.0 * batch * heads * seqlen_q * seqlen_k * head_dim
    return flops / 2 if causal else flops


def fmt(tflops):
    """A TFLOP/s table cell; n/a where a backend did not run the shape."""
    return "n/a" if tflops is None else f"{tflops:.0f}"


def save_results(out: Path, stem: str, rows, markdown):
    """Write <stem>_<gpu>.json and .md (markdown(rows, gpu, command) gives the table) under out,
    with the command line that produced them; returns (markdown, gpu name as in the file names)."""
    import torch

    gpu = torch.cuda.get_device_name().replace(" ", "_") if torch.cuda.is_available() else "cpu"
    command = f"python bench/{stem}.py " + " ".join(sys.argv[1:])
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}_{gpu}.json").write_text(json.dumps({"gpu": gpu, "command": command, "rows": rows}, indent=1))
    md = markdown(rows, gpu, command)
    (out / f"{stem}_{gpu}.md").write_text(md)
    return md, gpu


def gpu_bench_args(doc: str, argv=None, extra=None):
    """The benchmarks' command line: --out DIR (required) and any `extra(parser)` adds; exits
    when no GPU is visible."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    if extra:
        extra(ap)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit(f"{Path(sys.argv[0]).name} needs a GPU")
    return args
