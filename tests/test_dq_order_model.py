"""bench/dq_order_model.py: the model behind the ordered-dQ walk (backward b11 in bench/NOTES.md)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import dq_order_model as model  # noqa: E402

import pytest  # noqa: E402


def by_scheme(results, prefix):
    return next(r for r in results if r["scheme"].startswith(prefix))


def test_every_ordered_scheme_finishes_on_a_grid_larger_than_the_gpu():
    # 4 KV heads x 256 key blocks: 1024 workgroups for 132 slots, causal (rows of unequal length).
    results = model.model(8, 4, 32768 // 2, True, latency=0.5, free_at_read=False, l2_mb=50)
    assert [r["scheme"][:3] for r in results] == ["ato", "b10", "b11", "b13"]
    assert all(0.5 < r["busy"] <= 1 and r["relative"] > 0.7 for r in results)
    # b10 dispatched the shortest workgroups first under causal: the longest start last (a tail).
    assert by_scheme(results, "b11")["relative"] > by_scheme(results, "b10")["relative"] + 0.1


def test_a_turn_on_a_workgroup_not_yet_dispatched_is_reported_as_deadlock():
    order = model.kv_grid(1, 300, reverse=False)
    steps = {(h, n): model.steps_of(h, n, 1, 600, True, "head_major") for h, n in order}
    with pytest.raises(RuntimeError, match="deadlock"):  # n waits for n + 1, dispatched after it
        model.simulate(order, steps, lambda n, m: n + 1 if n + 1 < 300 and m >= 2 * n + 2 else None,
                       T=4, L=2, free_at_read=False, l2_units=100)


def test_the_walk_from_the_last_block_keeps_gqa_causal_rows_in_l2():
    # What made b11: under GQA and a causal mask, b10's resident workgroups spread over every head
    # of the group and more rows than L2 holds; walking query blocks from the last, heads inner,
    # they read the same rows at once.
    results = model.model(16, 2, 8192, True, latency=0.5, free_at_read=False, l2_mb=6)
    b10, b11 = by_scheme(results, "b10")["l2_hit"], by_scheme(results, "b11")["l2_hit"]
    assert b11 > 0.6 and b10 < 0.3, (b10, b11)
