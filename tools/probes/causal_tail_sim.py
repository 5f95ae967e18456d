"""Makespan of a persistent forward whose workers claim tiles in a given order (the dynamic queue
of kernels/sm90/tile_scheduler.h; the backward's key-block grid, one workgroup an SM, is dispatched
the same way), over the ideal (total work / workers), for three orders:
head-first with each row reversed (the order before the sections), block-first ascending, and
sections of S rows walked block-major with the m-blocks descending (`GridShape::longest_first_rows`;
docs/mapping.md, "Longest-first sections").
A tile costs 1 + its key blocks (a model: no measured step costs), so this says how much of a
kernel a tail can take, not its time.

  python tools/probes/causal_tail_sim.py
"""
import heapq
import math

WORKERS = 132  # one per SM of an H200


def makespan(costs, workers=WORKERS):
    """When the last worker finishes, each taking the next tile of `costs` when it is free."""
    free_at = [0.0] * workers
    for c in costs:
        heapq.heappush(free_at, heapq.heappop(free_at) + c)
    return max(free_at)


def tile_cost(m, n, block_m, block_n, causal):
    keys = min(n, (m + 1) * block_m) if causal else n
    return 1.0 + math.ceil(keys / block_n)


def orders(rows, blocks, sections, longest="last"):
    """{name: [block of each tile, in claim order]} (the rows do not change a tile's cost). `longest`:
    which end of a row holds its longest tiles (the forward's query blocks: the last; the backward's
    key blocks: the first), the end each row and section is walked from."""
    from_longest = list(reversed(range(blocks))) if longest == "last" else list(range(blocks))
    out = {
        "head_first (rows from the longest)": [m for _ in range(rows) for m in from_longest],
        "block_first": [m for m in range(blocks) for _ in range(rows)],
    }
    for s in sections:
        out[f"sections of {s} rows"] = [m for s0 in range(0, rows, s) for m in from_longest
                                        for _ in range(min(s, rows - s0))]
    return out


def ratios(cost, rows, sections, longest):
    ideal = sum(cost) * rows / WORKERS
    walks = orders(rows, len(cost), sections, longest)
    return {k: makespan(cost[m] for m in order) / ideal for k, order in walks.items()}


def report(name, b, h, n, block_m, block_n, sections, causal=True):
    """The forward's grid: rows (batch, q_head), m-block m reads the key blocks up to its last row."""
    cost = [tile_cost(m, n, block_m, block_n, causal) for m in range(math.ceil(n / block_m))]
    print(f"{name}: " + ", ".join(f"{k} {v:.3f}" for k, v in ratios(cost, b * h, sections, "last").items()))


def report_backward(name, b, h_kv, n, block_n, block_q, sections):
    """The causal backward's key-block grid: rows (batch, kv_head), key block j is seen by the query
    blocks (block_q rows each) from its first key on, one workgroup per SM (before the sections:
    rows ascending, i.e. from the longest)."""
    cost = [1.0 + math.ceil((n - j * block_n) / block_q) for j in range(math.ceil(n / block_n))]
    print(f"{name}: " + ", ".join(f"{k} {v:.3f}" for k, v in ratios(cost, b * h_kv, sections, "first").items()))


if __name__ == "__main__":
    report("B=8 H=16 N=2K D=64 causal", 8, 16, 2048, 192, 128, [4, 8, 12, 16, 24, 32])
    report("B=4 H=16 N=1000 D=64 causal", 4, 16, 1000, 192, 128, [4, 8, 12, 16, 24, 64])
    report("H=32 N=8K D=64 causal", 1, 32, 8192, 192, 128, [2, 4, 8, 16])
    report("H=32 N=8K D=128 causal", 1, 32, 8192, 128, 128, [2, 4, 8, 16])
    report("H=128 N=8K D=128 causal", 1, 128, 8192, 128, 128, [2, 4, 8, 16])
    report("B=4 H=32 N=4K D=128 causal", 4, 32, 4096, 128, 128, [2, 4, 8, 16])
    report("H=32 N=8K D=128", 1, 32, 8192, 128, 128, [2], causal=False)
    report_backward("backward B=8 H=16 N=2K D=64 causal", 8, 16, 2048, 128, 64, [8, 16, 32])
    report_backward("backward B=4 H=32/8 N=4K D=128 causal", 4, 8, 4096, 128, 64, [2, 4, 8])
    report_backward("backward H=32 N=8K D=128 causal", 1, 32, 8192, 128, 64, [2, 4, 8])
