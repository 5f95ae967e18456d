"""What the benchmarks (fwd.py, bwd.py, varlen.py, models.py, cpu.py) share: the peers they are
timed against, the `--shapes` grammar, timing, the SM clock beside it, FLOP counts and the result
files. The tools under tools/ that time or tabulate kernels use it too.

The --shapes grammar (every script that takes --shapes):

    B,H_Q,H_KV,N,D[,causal|,noncausal]

batch, query heads, key/value heads (H_Q a multiple of H_KV), sequence length (queries and keys),
head dim. A shape without a mask word runs under each mask that --causal (both, yes, no) allows;
one with a word runs under that mask only, and not at all where --causal excludes it. So
`--shapes 1,32,8,8192,128 8,16,16,2048,64,causal --causal both` makes three runs.

Result files: <benchmark>_<gpu>.json per GPU (the command, the tree, the GPU, its clocks and the
rows; <benchmark>.json for the CPU benchmark) and one markdown file per benchmark, <benchmark>.md,
generated from all of that benchmark's JSON files in the folder, a section per GPU. A run writes its
JSON and generates its benchmark's markdown again; `python bench/harness.py render [BENCHMARK ...]`
does the latter for bench/results/ (after a JSON file is added or a table's layout changes).
"""
import argparse
import contextlib
import importlib.util
import json
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

ROOT = Path(__file__).resolve().parent.parent

# --- peers -----------------------------------------------------------------------------------

# torch SDPA, by the backend it is held to: "sdpa" lets torch choose (what a model's SDPA path runs).
PEERS = {"sdpa": None, "sdpa_flash": SDPBackend.FLASH_ATTENTION, "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
         "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION}
PEER_NAMES = {"sdpa": "SDPA", "sdpa_flash": "flash", "sdpa_cudnn": "cuDNN", "sdpa_efficient": "efficient"}


def sdpa(peer, q, k, v, causal):
    """torch SDPA under a peer's backend, on (B, H, N, D) tensors; K/V with fewer heads than Q go
    in as GQA."""
    with sdpa_kernel(PEERS[peer]) if PEERS[peer] is not None else contextlib.nullcontext():
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=q.shape[1] != k.shape[1])


def sdpa_views(q, k, v, expand_kv=False):
    """The (B, H, N, D) views SDPA takes of (B, N, H, D) tensors; expand_kv repeats K/V to every
    query head first, so a peer's GQA path does not expand them inside the timed call."""
    if expand_kv and q.shape[2] != k.shape[2]:
        k, v = (t.repeat_interleave(q.shape[2] // k.shape[2], 2) for t in (k, v))
    return tuple(t.transpose(1, 2) for t in (q, k, v))


# FlashAttention-4 (package flash-attn-4, module flash_attn.cute: CuTe DSL kernels compiled on a shape's
# first call, which runs_or_none makes before any timing), where installed. It takes (B, N, H, D)
# tensors as chiplet_fa does, K/V with fewer heads as GQA.
PEER_NAMES["fa4"] = "FA4"


def fa4():
    """flash_attn.cute, or None where flash-attn-4 is not installed or does not import."""
    try:
        import flash_attn.cute as module
    except Exception:  # noqa: BLE001 - a peer that does not import is a column left out, for any reason
        return None
    return module


def peer_versions() -> dict:
    """The versions of the peers outside torch that are installed, for the result files."""
    from importlib.metadata import PackageNotFoundError, version
    found = {}
    for peer, package in (("fa4", "flash-attn-4"),):
        try:
            found[peer] = version(package)
        except PackageNotFoundError:
            pass
    return found


def refused(peer, error):
    """Says on stderr why a peer outside torch refused a shape (SDPA's refusals are routine)."""
    if not isinstance(error, RuntimeError) or peer == "fa4":
        print(f"{PEER_NAMES.get(peer, peer)} refused the shape: {type(error).__name__}: {str(error)[:200]}",
              file=sys.stderr)


def runs_or_none(fn, errors=(RuntimeError,), peer=None):
    """fn where it runs (called once here), None where the backend refuses the shape: raises one of
    errors (a peer outside torch may refuse with any exception)."""
    try:
        fn()
    except errors as e:
        refused(peer, e)
        return None
    return fn


def peer_forwards(peers, q, k, v, causal) -> dict:
    """{peer: its forward of chiplet_fa's (B, N, H, D) tensors, or None where it refuses the shape or is
    not installed}; SDPA's views (K/V expanded to every query head) made once, outside the calls."""
    fns, views = {}, None
    for peer in peers:
        if peer == "fa4":
            module = fa4()
            fns[peer] = module and runs_or_none(lambda: module.flash_attn_func(q, k, v, causal=causal), Exception, peer)
        else:
            views = views or sdpa_views(q, k, v, expand_kv=True)
            fns[peer] = runs_or_none(lambda peer=peer: sdpa(peer, *views, causal))
    return fns


def add_peers_argument(ap, default, choices=("sdpa_flash", "sdpa_cudnn", "sdpa_efficient", "fa4")):
    ap.add_argument("--peers", nargs="+", choices=choices, default=list(default),
                    help=f"the SDPA backends timed beside chiplet_fa (default: {' '.join(default)}); settled "
                         "(--settle-ms 1500), a column takes ~2 s a shape")


# --- shapes ----------------------------------------------------------------------------------

class Shape(NamedTuple):
    batch: int
    heads_q: int
    heads_kv: int
    seqlen: int
    head_dim: int
    causal: Optional[bool] = None  # None: each mask --causal allows


MASK_WORDS = {"causal": True, "noncausal": False}
CAUSAL_CHOICES = {"both": (False, True), "yes": (True,), "no": (False,)}


def parse_shape(text) -> Shape:
    """One --shapes entry: B,H_Q,H_KV,N,D[,causal|,noncausal]."""
    parts = text.split(",")
    if len(parts) not in (5, 6) or (len(parts) == 6 and parts[5] not in MASK_WORDS):
        raise argparse.ArgumentTypeError(f"{text!r}: a shape is B,H_Q,H_KV,N,D[,causal|,noncausal]")
    try:
        dims = [int(x) for x in parts[:5]]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: B, H_Q, H_KV, N and D are integers") from None
    if min(dims) < 1 or dims[1] % dims[2]:
        raise argparse.ArgumentTypeError(f"{text!r}: sizes are positive and H_Q a multiple of H_KV")
    return Shape(*dims, MASK_WORDS[parts[5]] if len(parts) == 6 else None)


def add_shapes_arguments(ap, default_help, causal_default="both", required=False):
    """--shapes (the grammar above) and --causal; shape_runs(args, default) reads them."""
    ap.add_argument("--shapes", nargs="+", type=parse_shape, required=required, metavar="B,H_Q,H_KV,N,D[,causal]",
                    help=f"these shapes instead of {default_help} (bench/harness.py: the grammar)")
    ap.add_argument("--causal", choices=tuple(CAUSAL_CHOICES), default=causal_default,
                    help="the masks a shape without a mask word runs under, and those any shape may run under")


def shape_runs(args, default=()):
    """[(B, H_Q, H_KV, N, D, causal)] of --shapes (else of default, Shapes too), in order."""
    allowed = CAUSAL_CHOICES[args.causal]
    return [(*s[:5], c) for s in (args.shapes or default)
            for c in ((False, True) if s.causal is None else (s.causal,)) if c in allowed]


# --- timing ----------------------------------------------------------------------------------

def time_ms(fn, min_total_ms: float = 300.0, max_reps: int = 50, graph: bool = False,
            settle_ms: float = 0.0, rest_ms: float = 0.0, windows: list = None) -> float:
    """Median milliseconds of fn() after one warm-up, repeating until min_total_ms elapses (CUDA
    events on a GPU, the wall clock without one). With graph=True (GPU only) a call shorter than
    GRAPH_MIN_MS is captured in a CUDA graph and the graph's replays are timed: a call of tens of
    microseconds is then timed without the host's launch work, which otherwise moves it by ~10%
    between repeats. Longer calls hide that work and are timed singly. settle_ms, rest_ms: as
    time_in_turns'; windows: a list the timed calls' wall-clock window is appended to."""
    with Timer(fn, graph) as timer:
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
    (ClockLog, below). A None fn times as None."""
    if rounds <= 1:  # one after another, each warmed up just before it is timed
        windows = {} if windows is None else windows
        return {name: None if fn is None else time_ms(fn, total_ms, graph=graph, settle_ms=settle_ms,
                                                      rest_ms=rest_ms, windows=windows.setdefault(name, []))
                for name, fn in fns.items()}
    timers = {}
    try:
        for name, fn in fns.items():
            timers[name] = Timer(fn, graph) if fn is not None else None
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


class Timer:
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


def add_timing_arguments(ap):
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
    """time_in_turns' (and timing_note's) keyword arguments from add_timing_arguments' options."""
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




# --- the SM clock ----------------------------------------------------------------------------
# nvidia-smi sampled in the background over a benchmark: whether a column ran slower because the
# GPU sat at its power cap (a lower clock) while it was timed. fwd.py and bwd.py give each column's
# mean SM clock over its timed calls (time_in_turns' windows, then column_clocks).

FIELDS = ("power.draw.instant", "power.draw")  # the instant reading where the driver has it


class ClockLog:
    """gpu: nvidia-smi's -i (an index, bus id or UUID); by default the first of CUDA_VISIBLE_DEVICES,
    else 0: the device the benchmarks run on (with CUDA_DEVICE_ORDER=PCI_BUS_ID where the
    machine has GPUs of several kinds). The samples go to a file, not a pipe: a pipe left unread
    for minutes fills and stops the sampler."""

    def __init__(self, period_ms: int = 20, gpu: str = None):
        self.period_ms = period_ms
        self.gpu = gpu or (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip()
        self.proc = None
        self.out = None
        self.power = None  # the power field nvidia-smi accepted
        self.rows = []

    def __enter__(self):
        for power in FIELDS:
            cmd = ["nvidia-smi", "-i", self.gpu, f"--query-gpu=timestamp,clocks.sm,{power}",
                   "--format=csv,noheader,nounits", f"-lms={self.period_ms}"]
            self.out = tempfile.TemporaryFile("w+")
            try:
                self.proc = subprocess.Popen(cmd, stdout=self.out, stderr=subprocess.DEVNULL, text=True)
            except OSError:  # no nvidia-smi
                self.out.close()
                break
            time.sleep(0.3)
            if self.proc.poll() is None:  # still sampling: the field is known
                self.power = power
                return self
            self.out.close()
        self.proc = None
        return self

    def __exit__(self, *exc):
        if self.proc is None:
            return
        self.proc.terminate()
        self.proc.wait()
        self.out.seek(0)
        lines = self.out.read().splitlines()
        self.out.close()
        for line in lines:
            parts = [p.strip() for p in line.split(",")]
            try:
                t = datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
                self.rows.append((t, float(parts[1]), float(parts[2])))
            except (ValueError, IndexError):
                continue

    def window(self, spans):
        """(mean SM clock MHz, mean power W, samples) of the samples inside any of spans ((t0, t1)
        pairs of time.time()), or None without samples."""
        inside = [(mhz, w) for t, mhz, w in self.rows if any(t0 <= t <= t1 for t0, t1 in spans)]
        if not inside:
            return None
        return (sum(m for m, _ in inside) / len(inside), sum(w for _, w in inside) / len(inside), len(inside))


def column_clocks(rows, clocks):
    """Each row's "windows" ({column: [(t0, t1)]}, time_in_turns') replaced by "<column>_mhz": the
    column's mean SM clock over its timed calls, None without samples (no nvidia-smi)."""
    for r in rows:
        for name, windows in r.pop("windows", {}).items():
            clock = clocks.window(windows)
            r[f"{name}_mhz"] = clock[0] if clock else None


def clock_pair(row, ours: str, peer: str) -> str:
    """A table cell: two columns' mean SM clocks, "1755 / 1620" (n/a where a column has none)."""
    cell = lambda key: "n/a" if row.get(f"{key}_mhz") is None else f"{row[f'{key}_mhz']:.0f}"  # noqa: E731
    return f"{cell(ours)} / {cell(peer)}"


def gpu_clocks():
    """The GPU's clocks and limits as nvidia-smi reads them when a benchmark starts, or None (no
    nvidia-smi): a table's readings depend on them."""
    fields = ("clocks.sm", "clocks.max.sm", "clocks.mem", "power.limit", "temperature.gpu", "driver_version")
    gpu = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip()
    try:
        out = subprocess.run(["nvidia-smi", "-i", gpu, f"--query-gpu={','.join(fields)}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    values = out.stdout.strip().splitlines()[:1]
    return dict(zip(fields, (v.strip() for v in values[0].split(",")))) if out.returncode == 0 and values else None


# --- results ---------------------------------------------------------------------------------

def tree():
    """The source tree measured: git's description of the checkout, else CHIPLET_FA_TREE (a copy
    without git, as on a GPU machine), else None."""
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True,
                             text=True, timeout=30)
        if out.returncode == 0:
            return out.stdout.strip()
    except OSError:
        pass
    return os.environ.get("CHIPLET_FA_TREE")


def gpu_name():
    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"


def result_header(benchmark: str, **extra) -> dict:
    """What a result file says besides its rows: the benchmark, the command (as run from the
    repository's root), the tree, the GPU and its clocks, and any extra fields."""
    script = Path(sys.argv[0]).resolve()
    script = script.relative_to(ROOT) if script.is_relative_to(ROOT) else script
    return {"benchmark": benchmark, "command": shlex.join(["python", str(script), *sys.argv[1:]]),
            "tree": tree(), "gpu": gpu_name(), "clocks": gpu_clocks(), "torch": torch.__version__,
            "peer_versions": peer_versions(), **extra}


def file_stem(result: dict) -> str:
    """<benchmark>_<device>: "fwd_h200" for an "NVIDIA H200", "models_cpu" without a GPU, "cpu" for
    the CPU benchmark; a result with a "tag" is <benchmark>_<tag>."""
    device = result.get("tag")
    if not device:
        model = re.search(r"\b[A-Z]+\d+[A-Z]*\b", result["gpu"])
        device = (model.group(0) if model else result["gpu"]).lower().replace(" ", "_")
    return result["benchmark"] if device == result["benchmark"] else f"{result['benchmark']}_{device}"


def save_results(out: Path, result: dict, markdown) -> str:
    """Writes result (result_header's fields and "rows") as out/<stem>.json and generates
    out/<benchmark>.md again from every JSON file of the benchmark in out (render_benchmark);
    returns markdown(result), this run's table alone. The JSON names the function's script, so that
    the markdown can be generated again from it (render)."""
    source = Path(markdown.__code__.co_filename).resolve()
    result = dict(result, markdown=str(source.relative_to(ROOT) if source.is_relative_to(ROOT) else source))
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{file_stem(result)}.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / f"{result['benchmark']}.md").write_text(render_benchmark(out, result["benchmark"],
                                                                    {result["markdown"]: markdown}))
    return markdown(result)


def moved_script(result: dict) -> str:
    """A note for a command whose script is no longer at the path it names (it ran on a tree where
    the script lived there): where the script is now, or "" while the path holds."""
    try:
        words = shlex.split(result["command"])
    except ValueError:
        return ""
    script = next((w for w in words[1:] if w.endswith(".py")), None)
    if script is None or Path(script).is_absolute() or (ROOT / script).exists():
        return ""
    now = result.get("markdown", "")
    now = f"; it is now `{now}`" if Path(now).name == Path(script).name else ""
    return f" (run on tree {result.get('tree') or 'not recorded'}, where the script was `{script}`{now})"


def header_lines(result: dict) -> list:
    """A table's lines about its run: command, tree, GPU and clocks."""
    clocks = result.get("clocks")
    clock = ("not recorded" if not clocks else
             f"SM {clocks['clocks.sm']} (max {clocks['clocks.max.sm']}), memory {clocks['clocks.mem']}, "
             f"power limit {clocks['power.limit']}, {clocks['temperature.gpu']} C, driver {clocks['driver_version']}")
    lines = [f"Command: `{result['command']}`{moved_script(result)}", "", f"Tree: {result.get('tree') or 'not recorded'}; "
             f"GPU: {result['gpu']}; clocks at the start: {clock}."]
    versions = {"torch": result.get("torch"), **{PEER_NAMES[p]: v for p, v in result.get("peer_versions", {}).items()}}
    if any(versions.values()):
        lines[-1] += " Versions: " + ", ".join(f"{name} {v}" for name, v in versions.items() if v) + "."
    if result.get("note"):
        lines += ["", result["note"]]
    return lines + [""]


def render(result, known=None) -> str:
    """The markdown of one result (a dict, or the path of its JSON file), generated again by the
    function that wrote it: known's ({script: function}) where it holds the script, else the script's
    `markdown`, loaded from its file."""
    if not isinstance(result, dict):
        result = json.loads(Path(result).read_text())
    if known and result["markdown"] in known:
        return known[result["markdown"]](result)
    spec = importlib.util.spec_from_file_location(f"render_{Path(result['markdown']).stem}", ROOT / result["markdown"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.markdown(result)


def result_files(folder: Path, benchmark: str) -> list:
    """The JSON files in folder whose "benchmark" is benchmark, by name (<benchmark>_<gpu>.json)."""
    files = []
    for f in sorted(Path(folder).glob("*.json")):
        try:
            result = json.loads(f.read_text())
        except ValueError:
            continue
        if isinstance(result, dict) and result.get("benchmark") == benchmark:
            files.append(f)
    return files


def render_benchmark(folder: Path, benchmark: str, known=None) -> str:
    """<benchmark>.md: a section per JSON file of the benchmark in folder (per GPU), each the table
    render (with known) gives, its headings one level down."""
    files = result_files(folder, benchmark)
    if not files:
        raise FileNotFoundError(f"no JSON file of benchmark {benchmark!r} in {folder}")
    results = [json.loads(f.read_text()) for f in files]
    devices = ", ".join("CPU" if r["gpu"] == "cpu" else r["gpu"] for r in results)
    sources = ", ".join(f"`{f.name}`" for f in files) + (", a section each" if len(files) > 1 else "")
    lines = [f"# {benchmark} results: {devices}", "",
             f"Generated by `python bench/harness.py render {benchmark}` from {sources}.", ""]
    for result in results:
        lines += ["#" + line if line.startswith("#") else line for line in render(result, known).rstrip("\n").split("\n")]
        lines.append("")
    return "\n".join(lines[:-1]) + "\n"


def gpu_bench_args(doc: str, argv=None, extra=None):
    """A GPU script's command line: --out DIR (required) and any `extra(parser)` adds; exits
    when no GPU is visible."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    if extra:
        extra(ap)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit(f"{Path(sys.argv[0]).name} needs a CUDA or ROCm device")
    return args


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="generate benchmarks' markdown again from their JSON files: "
                                             "<benchmark>.md from every <benchmark>_<gpu>.json in --dir")
    ap.add_argument("command", choices=["render"])
    ap.add_argument("benchmarks", nargs="*",
                    help="fwd, bwd, ... (a JSON file names its benchmark and folder); none: every benchmark in --dir")
    ap.add_argument("--dir", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args()
    todo = []
    for name in args.benchmarks:
        if name.endswith(".json"):
            todo.append((Path(name).parent, json.loads(Path(name).read_text())["benchmark"]))
        else:
            todo.append((args.dir, name))
    if not args.benchmarks:
        todo = sorted({(args.dir, json.loads(f.read_text()).get("benchmark")) for f in args.dir.glob("*.json")} - {(args.dir, None)})
    for folder, benchmark in dict.fromkeys(todo):
        (folder / f"{benchmark}.md").write_text(render_benchmark(folder, benchmark))
        print(f"wrote {folder / f'{benchmark}.md'}")
