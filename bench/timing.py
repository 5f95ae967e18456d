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


def time_ms(fn, min_total_ms: float = 300.0, max_reps: int = 50, graph: bool = False,
            settle_ms: float = 0.0, rest_ms: float = 0.0, windows: list = None) -> float:
    """Median milliseconds of fn() after one warm-up, repeating until min_total_ms elapses (CUDA
    events on a GPU, the wall clock without one). With graph=True (GPU only) a call shorter than
    GRAPH_MIN_MS is captured in a CUDA graph and the graph's replays are timed: a call of tens of
    microseconds is then timed without the host's launch work, which otherwise moves it by ~10%
    between repeats. Longer calls hide that work and are timed singly. settle_ms, rest_ms: as
    time_in_turns'; windows: a list the timed calls' wall-clock window is appended to."""
    with _Timer(fn, graph) as timer:
        ms = timer.ms(min_total_ms, max_reps, settle_ms=settle_ms, rest_ms=rest_ms)
        if windows is not None:
            windows.extend(timer.windows)
        return ms


def time_in_turns(fns, graph: bool = False, rounds: int = 1, total_ms: float = 300.0,
                  settle_ms: float = 0.0, rotate: bool = False, rest_ms: float = 0.0, windows: dict = None) -> dict:
    """{name: median milliseconds a call} of fns ({name: fn, or None for a backend that does not
    run}, in the order given). rounds = 1 (the tables' method): each fn timed for total_ms, one
    after another, as by time_ms. More rounds: each round times every fn for about total_ms /
    rounds (one call at least), and a fn's time is the median of its rounds' medians. Why turns:
    the H200 runs these kernels at its 700 W cap, where the clock moved between 1.4 and 2.0 GHz
    from one second to the next of a sweep, so a fn timed after another meets the clock its
    predecessor left; 60 ms turns did not remove that (docs/benchmarking.md, "Timing at the power cap").
    settle_ms > 0 runs a fn that long, untimed, right before each of its timings, so that it is
    timed at the clock its own load sets. rotate (with rounds > 1): round r starts at the r-th fn
    and goes round, so each fn follows each other one in some round, not always the same (the fixed
    order moved each column with its place: same section). rest_ms > 0 leaves the GPU idle that long before
    each timing (and its settling), so that every fn starts from the same rested clock instead of
    the one its predecessor left. windows (a dict): each fn's timed calls' wall-clock windows
    (time.time() pairs, settling and resting left out) as windows[name], for a clock log
    (bench/clock_log.py). A None fn times as None."""
    if rounds <= 1:  # one after another, each warmed up just before it is timed
        windows = {} if windows is None else windows
        return {name: None if fn is None else time_ms(fn, total_ms, graph=graph, settle_ms=settle_ms,
                                                      rest_ms=rest_ms, windows=windows.setdefault(name, []))
                for name, fn in fns.items()}
    timers = {}
    try:
        for name, fn in fns.items():
            timers[name] = _Timer(fn, graph) if fn is not None else None
        rounds_ms = {name: [] for name, t in timers.items() if t is not None}
        names = list(rounds_ms)
        for r in range(rounds):
            first = r % len(names) if rotate and names else 0
            for name in names[first:] + names[:first]:
                rounds_ms[name].append(timers[name].ms(total_ms / rounds, min_reps=1, settle_ms=settle_ms,
                                                       rest_ms=rest_ms))
        if windows is not None:
            windows.update({name: t.windows for name, t in timers.items() if t is not None})
        return {name: statistics.median(rounds_ms[name]) if t is not None else None for name, t in timers.items()}
    finally:
        for t in timers.values():
            if t is not None:
                t.close()


class _Timer:
    """fn made ready for repeated timing: warmed up, and captured in a CUDA graph of enough calls
    to fill GRAPH_MIN_MS where graph=True and a call is shorter (GPU only). The capture runs on the
    current stream unless that is the default one (which cannot be captured): autograd runs a
    backward on its forward's stream, so a benchmark that keeps a forward for repeated backwards
    makes it on a side stream of its own, and the capture follows it there. close() frees the
    graph's private memory pool."""

    def __init__(self, fn, graph):
        self.gpu = torch.cuda.is_available()
        self.fn, self.calls, self.graph = fn, 1, None
        self.windows = []  # (start, end) time.time() of each ms() call's timed calls
        fn()
        if not self.gpu:
            return
        torch.cuda.synchronize()
        if graph:
            first = _median_ms(fn, True, 0.0, 1)
            if first < GRAPH_MIN_MS:
                try:
                    self._capture(max(1, min(256, math.ceil(GRAPH_MIN_MS / max(first, 1e-3)))))
                except RuntimeError as err:  # a call that cannot be captured: say so, time it singly
                    torch.cuda.synchronize()
                    print(f"time_ms: CUDA-graph capture failed, timed as single calls: {err}",
                          file=sys.stderr, flush=True)

    def _capture(self, calls):
        current = torch.cuda.current_stream()
        stream = current if current != torch.cuda.default_stream() else torch.cuda.Stream()
        stream.wait_stream(current)
        with torch.cuda.stream(stream):  # first-call work (workspaces, plans) stays out of the capture
            self.fn()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=stream):
            for _ in range(calls):
                self.fn()
        current.wait_stream(stream)
        g.replay()
        self.graph, self.calls = g, calls

    def ms(self, min_total_ms, max_reps=50, min_reps=3, settle_ms=0.0, rest_ms=0.0):
        run = self.graph.replay if self.graph is not None else self.fn
        if rest_ms > 0 and self.gpu:  # idle: the power controller lets the clock back up
            torch.cuda.synchronize()
            time.sleep(rest_ms / 1e3)
        if settle_ms > 0:  # untimed: calls until settle_ms have passed
            _median_ms(run, self.gpu, settle_ms, 1 << 30, self.calls, min_reps=1)
        start = time.time()
        ms = _median_ms(run, self.gpu, min_total_ms, max_reps, self.calls, min_reps)
        self.windows.append((start, time.time()))  # _median_ms synchronises after each call
        return ms

    def close(self):
        if self.graph is not None:
            self.graph = None
            torch.cuda.synchronize()
            torch.cuda.empty_cache()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def add_timing_argument(ap):
    """--timing (graph or eager calls), --rounds, --rotate, --settle-ms and --rest-ms: time_in_turns' keyword
    arguments, which timing_options(args) gives."""
    ap.add_argument("--timing", choices=["graph", "eager"], default="graph",
                    help=f"graph: calls under {GRAPH_MIN_MS:g} ms timed as replays of a CUDA graph of "
                         "them (no launch work), longer ones singly; eager: every call singly between "
                         "events (with the host's launch work)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="a shape's columns timed in this many turns (time_in_turns); 1 (default): one "
                         "column after another, each for 300 ms. In 60 ms turns (5) a column's time "
                         "carried its predecessor's clock: see docs/benchmarking.md, timing at the power cap")
    ap.add_argument("--rotate", action="store_true",
                    help="with --rounds > 1: each round starts one column later (each column takes every "
                         "place in the order over the rounds)")
    ap.add_argument("--settle-ms", type=float, default=0.0,
                    help="run each column this long, untimed, right before each of its timings, so that "
                         "it is timed at the clock its own load sets (the H200 runs at its power cap)")
    ap.add_argument("--rest-ms", type=float, default=0.0,
                    help="leave the GPU idle this long before each column's timing, so that each starts "
                         "from the same rested clock, not the one its predecessor left")


def timing_options(args) -> dict:
    """time_in_turns' (and timing_note's) keyword arguments from add_timing_argument's options."""
    return {"graph": args.timing == "graph", "rounds": args.rounds, "settle_ms": args.settle_ms,
            "rotate": args.rotate, "rest_ms": args.rest_ms}


def _median_ms(fn, gpu, min_total_ms, max_reps, calls=1, min_reps=3):
    times = []
    while len(times) < max_reps and (len(times) < min_reps or sum(times) < min_total_ms):
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
def timing_note(graph: bool, rounds: int = 1, settle_ms: float = 0.0, rotate: bool = False,
                rest_ms: float = 0.0) -> str:
    """How a table names its timing (time_ms's graph argument, time_in_turns' rounds, settle_ms,
    rotate and rest_ms)."""
    calls = (f"of CUDA-graph replays below {GRAPH_MIN_MS:g} ms a call, of single calls above" if graph
             else "of single calls")
    turns = f", the columns timed in {rounds} turns" + (", each round starting one column later" if rotate else "")
    return (calls + (turns if rounds > 1 else "")
            + (f", each after {rest_ms:g} ms of an idle GPU" if rest_ms > 0 else "")
            + (f", each after {settle_ms:g} ms of its own calls" if settle_ms > 0 else ""))


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
