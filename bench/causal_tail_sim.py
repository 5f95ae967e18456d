"""Makespan of a persistent forward whose workers claim tiles in a given order (the dynamic queue
of kernels/sm90/tile_scheduler.h), over the ideal (total work / workers), for three orders:
head-first with each row reversed (the order before v21), block-first ascending, and sections
of S rows walked block-major with the m-blocks descending (v21: `GridShape::longest_first_rows`).
A tile costs 1 + its key blocks (a model: no measured step costs), so this says how much of a
kernel a tail can take, not its time.

  python bench/causal_tail_sim.py
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


def orders(rows, m_blocks, sections):
    """{name: [m-block of each tile, in claim order]} (the rows do not change a tile's cost)."""
    out = {
        "head_first (rows reversed)": [m for _ in range(rows) for m in reversed(range(m_blocks))],
        "block_first": [m for m in range(m_blocks) for _ in range(rows)],
    }
    for s in sections:
        out[f"sections of {s} rows"] = [m for s0 in range(0, rows, s)
                                        for m in reversed(range(m_blocks)) for _ in range(min(s, rows - s0))]
    return out


def report(name, b, h, n, block_m, block_n, sections, causal=True):
    m_blocks = math.ceil(n / block_m)
    cost = [tile_cost(m, n, block_m, block_n, causal) for m in range(m_blocks)]
    ideal = sum(cost) * b * h / WORKERS
    ratios = {k: makespan(cost[m] for m in order) / ideal for k, order in orders(b * h, m_blocks, sections).items()}
    print(f"{name}: " + ", ".join(f"{k} {v:.3f}" for k, v in ratios.items()))


if __name__ == "__main__":
    report("B=8 H=16 N=2K D=64 causal", 8, 16, 2048, 192, 128, [4, 8, 12, 16, 24, 32])
    report("B=4 H=16 N=1000 D=64 causal", 4, 16, 1000, 192, 128, [4, 8, 12, 16, 24, 64])
    report("H=32 N=8K D=64 causal", 1, 32, 8192, 192, 128, [2, 4, 8, 16])
    report("H=32 N=8K D=128 causal", 1, 32, 8192, 128, 128, [2, 4, 8, 16])
    report("H=128 N=8K D=128 causal", 1, 128, 8192, 128, 128, [2, 4, 8, 16])
    report("B=4 H=32 N=4K D=128 causal", 4, 32, 4096, 128, 128, [2, 4, 8, 16])
    report("H=32 N=8K D=128", 1, 32, 8192, 128, 128, [2], causal=False)
