"""Workgroup timelines of the sm90 kernels, from a diagnostic build (csrc/kernels/trace.h):
when each SM ran which tile, which Nsight Compute's totals cannot say.

  CHIPLET_FA_TRACE=1 CHIPLET_FA_DTYPES=bf16 CHIPLET_FA_HDIMS=64,128 pip install --no-build-isolation .
  python tools/probes/trace.py --shapes 8,16,16,2048,64,causal 1,32,32,8192,128,noncausal \
      --mappings head_first block_first --out DIR
  (bash tools/device/device_run.sh trace, with CHIPLET_FA_TRACE=1 and TRACE_ARGS)

Shapes: bench/harness.py's grammar. For each shape and mapping it runs the forward and the
backward once untraced, then once traced (in the backward, its main pass records), and writes
trace_<gpu>.json and trace.md:
  forward (persistent workers): the span from the first tile's start to the last one's end (a split
    last round's pieces count as items, their tiles once); the
    workers' idle share at the end (the tail) and at the start; a fit of a consumer's tile time
    to its key blocks (the fixed cost of a tile and the cost of a block; a non-causal grid's equal
    tiles give only the mean a block); the share of the
    consumers' tile cycles spent waiting for K, and the cycles a tile's Q and its first K block
    kept them waiting (the copies a tile starts with); each head's time a key block, whose spread
    says whether some heads' K/V are served slower (placement in the L2: docs/benchmarking.md,
    "Timing at the power cap");
  backward (one workgroup per key block): the span; the gap on an SM between one workgroup's
    last consumer and the next workgroup's start (launch and teardown); a fit of a workgroup's
    time to its steps (fixed cost of a workgroup, cost of a step); the tail.
A traced kernel runs a few instructions more per tile than the default build's: its times are
for comparing tiles and mappings within one run, not for the tables of fwd.py and bwd.py.
"""
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import NamedTuple

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import harness  # noqa: E402

WORDS, ROLES, WORKGROUP_ROLE = 8, 8, 7  # kernels/trace.h: kTraceWords, kTraceRoles, kTraceWorkgroup
FWD_BEGIN, FWD_END, BWD_BEGIN, BWD_CONSUMER_END, BWD_PRODUCER_END = 1, 2, 3, 4, 5


class Event(NamedTuple):
    ns: int
    kind: int
    role: int
    sm: int
    workgroup: int
    n: int  # the event's slot: its index among its role's events
    fields: tuple


def decode(words, slots):
    """The recorded events of an int32 trace buffer (kernels/trace.h's layout); empty slots skipped."""
    rows = words.view(-1, WORDS)
    live = ((rows[:, 2] & 0xFF) != 0).nonzero().flatten()  # most slots of a sized-up buffer stay empty
    events = []
    for i, w in zip(live.tolist(), rows[live].tolist()):
        u = [x & 0xFFFFFFFF for x in w]
        events.append(Event(u[0] | u[1] << 32, u[2] & 0xFF, (u[2] >> 8) & 0xFF, u[2] >> 16, u[3], i % slots,
                            tuple(u[4:])))
    return events


def fit(xs, ys):
    """Least-squares (intercept, slope) of ys on xs. Where xs do not vary (a non-causal grid's
    equal tiles) there is no intercept to find: (None, mean y / mean x)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if not sxx:
        return None, my / mx if mx else 0.0
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - slope * mx, slope


def us(ns):
    return None if ns is None else ns / 1e3


def idle_shares(spans, t0, t1):
    """Mean share of [t0, t1] the units of spans {unit: (first start, last end)} sat idle before
    their first start and after their last end."""
    total = (t1 - t0) * len(spans)
    head = sum(s - t0 for s, _ in spans.values()) / total
    tail = sum(t1 - e for _, e in spans.values()) / total
    return head, tail


def summarize_fwd(events):
    """The forward's timeline (see the top): one consumer tile is a begin and an end event."""
    begins = {(e.workgroup, e.role, e.n // 2): e for e in events if e.kind == FWD_BEGIN}
    ends = {(e.workgroup, e.role, e.n // 2): e for e in events if e.kind == FWD_END}
    if not begins or begins.keys() != ends.keys():
        raise RuntimeError(f"trace: {len(begins)} tile starts against {len(ends)} ends (events dropped?)")
    t0 = min(e.ns for e in begins.values())
    t1 = max(e.ns for e in ends.values())
    workers = defaultdict(lambda: [t1, t0])
    for key, b in begins.items():
        w = workers[key[0]]
        w[0], w[1] = min(w[0], b.ns), max(w[1], ends[key].ns)
    head, tail = idle_shares({w: tuple(v) for w, v in workers.items()}, t0, t1)
    blocks = [ends[k].fields[2] for k in begins]
    ns = [ends[k].ns - begins[k].ns for k in begins]
    fixed, per_block = fit(blocks, ns)
    cycles = sum(ends[k].fields[0] for k in begins)
    # A tile of a split last round (kernels/tail_split.h) comes in pieces: an item a worker ran is
    # a tile or a piece, and a tile is its (batch, head, m block) whatever it came in.
    items = {(b.workgroup, b.n // 2) for b in begins.values()}
    tiles = {b.fields[:2] for b in begins.values()}
    heads = per_head_block_ns(begins, ends)
    return {"span_us": (t1 - t0) / 1e3, "workers": len(workers), "tiles": len(tiles), "items": len(items),
            "consumer_tiles": len(begins), "idle_start": head, "idle_end": tail,
            "tile_fixed_us": us(fixed), "block_us": us(per_block),
            "k_wait_share": sum(e.fields[1] + e.fields[3] for e in ends.values()) / cycles if cycles else 0.0,
            "q_wait_kcycles_per_tile": sum(b.fields[3] for b in begins.values()) / len(begins) / 1e3,
            "k_first_kcycles_per_tile": sum(e.fields[1] for e in ends.values()) / len(ends) / 1e3,
            "clock_ghz": cycles / sum(ns) if sum(ns) else 0.0,
            "head_block_us": [heads[0] / 1e3, statistics.median(heads) / 1e3, heads[-1] / 1e3] if heads else None}


def per_head_block_ns(begins, ends):
    """Each (batch, query head)'s consumer time a key block, sorted: whether some heads' K/V are
    served slower than others' (where their lines lie in the L2), which the fit's mean hides."""
    ns, blocks = defaultdict(int), defaultdict(int)
    for key, b in begins.items():
        head = (b.fields[0], b.fields[1] >> 16)
        ns[head] += ends[key].ns - b.ns
        blocks[head] += b.fields[2]
    return sorted(ns[h] / blocks[h] for h in ns if blocks[h])


def summarize_bwd(events):
    """The backward main pass's timeline (see the top): a workgroup's start and its consumers' ends."""
    begin = {e.workgroup: e for e in events if e.kind == BWD_BEGIN}
    end = defaultdict(int)
    for e in events:
        if e.kind == BWD_CONSUMER_END:
            end[e.workgroup] = max(end[e.workgroup], e.ns)
    if not begin or begin.keys() != end.keys():
        raise RuntimeError(f"trace: {len(begin)} workgroup starts against {len(end)} ends (events dropped?)")
    t0, t1 = min(e.ns for e in begin.values()), max(end.values())
    by_sm = defaultdict(list)
    for w, b in begin.items():
        by_sm[b.sm].append((b.ns, end[w]))
    gaps = [nxt[0] - prev[1] for runs in by_sm.values() for prev, nxt in zip(sorted(runs), sorted(runs)[1:])]
    _, tail = idle_shares({sm: (min(r)[0], max(e for _, e in r)) for sm, r in by_sm.items()}, t0, t1)
    fixed, per_step = fit([b.fields[0] for b in begin.values()], [end[w] - b.ns for w, b in begin.items()])
    return {"span_us": (t1 - t0) / 1e3, "workgroups": len(begin), "sms": len(by_sm),
            "gap_us": sum(gaps) / len(gaps) / 1e3 if gaps else 0.0, "idle_end": tail,
            "workgroup_fixed_us": us(fixed), "step_us": us(per_step),
            "gap_share": sum(gaps) / ((t1 - t0) * len(by_sm))}


def traced(fn, workgroups, slots):
    """The events of one traced call of fn (whose launches record into a fresh buffer)."""
    from chiplet_fa import _C

    words = torch.zeros(workgroups * ROLES * slots * WORDS, dtype=torch.int32, device="cuda")
    fn()  # untraced first: one-time work (tensor maps, allocations) stays out of the timeline
    torch.cuda.synchronize()
    _C._trace_set(words.data_ptr(), workgroups, slots)
    try:
        fn()
        torch.cuda.synchronize()
    finally:
        _C._trace_set(0, 0, 0)
    return decode(words.cpu(), slots)


def trace_shape(b, hq, hkv, n, d, causal, mapping):
    """(forward summary, backward summary) of one shape and mapping."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16, generator=gen) for h in (hq, hkv, hkv))
    ops = torch.ops.chiplet_fa
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    block_m = 192 if d <= 64 else 128
    tiles = b * hq * -(-n // block_m)
    # Workers take tiles from a queue: a few times the mean share bounds any one worker's.
    fwd = summarize_fwd(traced(lambda: ops.fwd(q, k, v, None, causal, mapping, -1), sms,
                               2 * (4 * -(-tiles // sms) + 8)))
    if fwd["tiles"] != tiles:  # at most one worker an SM (kernels/sm90/tile_scheduler.h)
        raise RuntimeError(f"trace: {fwd['tiles']} forward tiles recorded of {tiles} (slots overrun, or the build "
                           f"runs D = {d} on another head dim's tiles: CHIPLET_FA_HDIMS should name {d})")
    out, lse = ops.fwd(q, k, v, None, causal, mapping, -1)
    dout = torch.randn_like(q)
    key_blocks = b * hq * -(-n // 64)  # at least the main pass's workgroups, whatever its split
    bwd = summarize_bwd(traced(lambda: ops.bwd(dout, q, k, v, out, lse, None, causal, mapping, -1, False),
                               key_blocks, 2))
    return fwd, bwd


def cell(value, spec):
    return "-" if value is None else format(value, spec)


def markdown(result):
    rows = result["rows"]
    lines = [f"# Workgroup timelines of the sm90 kernels ({result['gpu']}, a traced build)\n",
             "\n".join(harness.header_lines(result)),
             "Forward: span, idle share of the workers at the start and the end, a consumer's tile = fixed + "
             "per key block (no fixed part where every tile has as many blocks), the consumers' tile cycles waiting for K, the waits a tile for its Q and first K block, "
             "a head's time a key block (min / median / max over the heads).\n",
             "| shape | mapping | span us | tiles | idle start | idle end | tile fixed us | block us | K wait | "
             "Q wait kcyc | K0 wait kcyc | GHz | head block us |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        f = r["fwd"]
        tiles = f"{f['tiles']}" if f["items"] == f["tiles"] else f"{f['tiles']} ({f['items']} items)"
        lines.append(f"| {r['shape']} | {r['mapping']} | {f['span_us']:.1f} | {tiles} | {f['idle_start']:.1%} | "
                     f"{f['idle_end']:.1%} | {cell(f['tile_fixed_us'], '.2f')} | {f['block_us']:.3f} | "
                     f"{f['k_wait_share']:.1%} | {f['q_wait_kcycles_per_tile']:.1f} | "
                     f"{f['k_first_kcycles_per_tile']:.1f} | {f['clock_ghz']:.2f} | "
                     + cell(f["head_block_us"] and " / ".join(f"{x:.3f}" for x in f["head_block_us"]), "")
                     + " |")
    lines += ["\nBackward main pass: span, workgroups, mean gap on an SM between workgroups and its share of the "
              "SMs' time, a workgroup = fixed + per step (no fixed part where every workgroup has as many steps), "
              "idle share at the end.\n",
              "| shape | mapping | span us | workgroups | gap us | gap share | workgroup fixed us | step us | idle end |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        g = r["bwd"]
        lines.append(f"| {r['shape']} | {r['mapping']} | {g['span_us']:.1f} | {g['workgroups']} | {g['gap_us']:.2f} | "
                     f"{g['gap_share']:.1%} | {cell(g['workgroup_fixed_us'], '.2f')} | {g['step_us']:.3f} | "
                     f"{g['idle_end']:.1%} |")
    return "\n".join(lines) + "\n"


def main():
    def extra(ap):
        harness.add_shapes_arguments(ap, "-", required=True)
        ap.add_argument("--mappings", nargs="+", default=["head_first"],
                        choices=("block_first", "head_first", "swizzled_block_first", "swizzled_head_first"))

    args = harness.gpu_bench_args(__doc__, extra=extra)
    import chiplet_fa

    if not chiplet_fa.build_info()["trace"]:
        sys.exit("trace.py needs a traced build: CHIPLET_FA_TRACE=1 pip install --no-build-isolation .")
    result = harness.result_header("trace")
    rows = []
    for b, hq, hkv, n, d, causal in harness.shape_runs(args):
        for mapping in args.mappings:
            fwd, bwd = trace_shape(b, hq, hkv, n, d, causal, mapping)
            rows.append({"shape": f"{b},{hq},{hkv},{n},{d},{'causal' if causal else 'noncausal'}", "mapping": mapping,
                         "fwd": fwd, "bwd": bwd})
    print(harness.save_results(args.out, dict(result, rows=rows), markdown))


if __name__ == "__main__":
    main()
