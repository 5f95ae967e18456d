"""A model of the sm90 backward's KV grid under ordered dQ (deterministic mode): dispatch, turns
and the L2 working set, to compare walks and turn orders before spending device time on them.

  python bench/dq_order_model.py --shapes 1,64,8,32768 1,32,32,8192 --causal yes --out DIR

Model: one workgroup per SM (132), dispatched in the order of `map_kv_workgroup` (head_first on
one L2 domain, from the mapping library) or that order reversed within each KV row; a step (one
query head x 64-row block, 128 keys) takes T; a workgroup's dQ writer adds a step's share once
the consumers staged it and the neighbour passed its turn on that block, and passes its own L
later (the reduction complete); the consumers restage after the writer frees the staging: at
the pass (`--free pass`, backward b10) or once the copy engine read it (`--free read`, b12).
L2: least recently used over (query head, block) units of Q, dO and the fp32 dQ rows (64 KB),
`--l2-mb` in all. Writes dq_order_model.md: per scheme the SMs' busy fraction, the time
relative to atomic dQ (dispatch and turns only) and the L2 hit rate of the steps' reads.
"""
import argparse
import collections
import sys
from pathlib import Path

import chiplet_fa.mapping as mapping

SLOTS = 132
UNIT_BYTES = 64 * 128 * (2 + 2 + 4)  # a 64-row block of Q, dO (bf16) and dQ (fp32) at D = 128
# (name, walk, turns): turns None (atomic), "ascending" (n waits for n - 1) or "b10" (ascending, but
# under a causal mask descending with the KV grid reversed within rows)
SCHEMES = [
    ("atomic dQ (head by head from the diagonal)", "head_major", None),
    ("b10 ordered (grid reversed under causal, head by head, n+1 first under causal)", "head_major", "b10"),
    ("b11 ordered (query blocks from the last, heads inner, n-1 first)", "from_last", "ascending"),
    ("b13 atomic dQ (query blocks from the last, heads inner)", "from_last", None),
]


def kv_grid(hkv, n_blocks, reverse):
    """(kv_head, n) per workgroup in dispatch order: the mapping's head-first KV grid."""
    tiles = mapping.map_workgroups("head_first", 1, hkv, hkv, n_blocks, 1).tolist()
    if reverse:
        tiles = [(b, h, n_blocks - 1 - n) for b, h, n in tiles]
    return [(h, n) for _, h, n in tiles]


def steps_of(kv_head, n, G, M, causal, walk):
    rows = range(2 * n if causal else 0, M)
    heads = [kv_head * G + j for j in range(G)]
    if walk == "head_major":
        return [(h, m) for h in heads for m in rows]
    return [(h, m) for m in reversed(rows) for h in heads]


def simulate(order, steps, waits_for, T, L, free_at_read, l2_units):
    """Ticks until the last workgroup ends, busy SM-ticks, L2 hits and accesses. Raises
    RuntimeError where every resident workgroup waits (a turn on one not dispatched: deadlock)."""
    passed = {}  # (h, m) -> (n that passed last, tick its pass is visible)
    lru = collections.OrderedDict()
    hits = accesses = 0
    queue = collections.deque(order)
    active = []
    tick = busy = last_progress = 0

    def read(unit):
        nonlocal hits, accesses
        accesses += 1
        if unit in lru:
            hits += 1
            lru.move_to_end(unit)
        else:
            lru[unit] = True
            if len(lru) > l2_units:
                lru.popitem(last=False)

    while queue or active:
        while queue and len(active) < SLOTS:
            kv_head, n = queue.popleft()
            s = dict(n=n, steps=steps[(kv_head, n)], k=0, start=tick, staged=[], passes=[])
            active.append(s)
            if s["steps"]:
                read(s["steps"][0])
        still = []
        for s in active:
            todo, k = s["steps"], s["k"]
            if k < len(todo):
                busy += 1
                free = k == 0 or waits_for is None or (
                    len(s["passes"]) >= k and s["passes"][k - 1] - (L - 1 if free_at_read else 0) <= tick)
                if tick >= s["start"] + T and free:
                    s["staged"].append(tick)
                    last_progress = tick
                    s["k"], s["start"] = k + 1, tick
                    if k + 1 < len(todo):
                        read(todo[k + 1])
            w = len(s["passes"])
            if waits_for is not None and w < len(s["staged"]):
                unit = todo[w]
                prev = waits_for(s["n"], unit[1])
                got = passed.get(unit)
                if prev is None or (got is not None and got[0] == prev and got[1] <= tick):
                    passed[unit] = (s["n"], tick + L)
                    last_progress = tick
                    s["passes"].append(tick + L)
            done = s["k"] >= len(todo) and (waits_for is None or len(s["passes"]) == len(todo))
            if not done:
                still.append(s)
        active = still
        tick += 1
        if tick - last_progress > 4 * (T + L):
            raise RuntimeError(f"deadlock at tick {tick}: every resident workgroup waits for a turn")
    return tick, busy, hits, accesses


def model(hq, hkv, n, causal, latency, free_at_read, l2_mb, T=4):
    G, M, NB = hq // hkv, n // 64, n // 128
    L = max(1, round(latency * T))
    l2_units = int(l2_mb * 2**20 // UNIT_BYTES)
    rows_of = lambda nb: range(2 * nb if causal else 0, M)  # noqa: E731
    results = []
    for name, walk, turns in SCHEMES:
        descending = turns == "b10" and causal
        order = kv_grid(hkv, NB, reverse=descending)
        steps = {(h, nb): steps_of(h, nb, G, M, causal, walk) for h, nb in order}
        waits_for = None
        if turns is not None:
            def waits_for(nb, m, step=1 if descending else -1):
                prev = nb + step
                return prev if 0 <= prev < NB and m in rows_of(prev) else None
        ticks, busy, hits, accesses = simulate(order, steps, waits_for, T, L, free_at_read, l2_units)
        results.append(dict(scheme=name, ticks=ticks, busy=busy / (SLOTS * ticks), l2_hit=hits / accesses))
    for r in results:
        r["relative"] = results[0]["ticks"] / r["ticks"]
    return results


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="+", required=True, metavar="B,H_Q,H_KV,N", help="B must be 1")
    ap.add_argument("--causal", choices=["yes", "no", "both"], default="both")
    ap.add_argument("--latency", type=float, default=0.5, help="a turn's latency L in steps T")
    ap.add_argument("--free", choices=["pass", "read"], default="pass")
    ap.add_argument("--l2-mb", type=float, default=50.0, help="L2 the working set may use")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    lines = ["# Ordered dQ: dispatch, turns and L2 working set (model, not a measurement)", "",
             f"Command: `python bench/dq_order_model.py {' '.join(argv if argv is not None else sys.argv[1:])}`", "",
             f"Turn latency {a.latency} step, staging freed at the {a.free}, {a.l2_mb:g} MB of L2, "
             f"{SLOTS} workgroups resident.", "",
             "| B | H_q | H_kv | N | causal | scheme | SMs busy | time vs atomic | L2 hits |",
             "|---|---|---|---|---|---|---|---|---|"]
    causals = {"yes": [True], "no": [False], "both": [False, True]}[a.causal]
    for shape in a.shapes:
        b, hq, hkv, n = (int(x) for x in shape.split(","))
        if b != 1:
            ap.error("the model covers B = 1")
        for causal in causals:
            for r in model(hq, hkv, n, causal, a.latency, a.free == "read", a.l2_mb):
                lines.append(f"| {b} | {hq} | {hkv} | {n} | {'yes' if causal else 'no'} | {r['scheme']} | "
                             f"{r['busy']:.2f} | {r['relative']:.2f} | {r['l2_hit']:.2f} |")
                print(lines[-1], flush=True)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "dq_order_model.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
