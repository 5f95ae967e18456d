"""tools/probes/trace.py on the CPU: decoding kernels/trace.h's buffer layout and the timeline arithmetic,
on hand-made events; and the default build's refusal to trace."""
import importlib.util
from pathlib import Path

import pytest
import torch

import chiplet_fa

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("trace", ROOT / "tools" / "probes" / "trace.py")
trace = importlib.util.module_from_spec(spec)
spec.loader.exec_module(trace)

SLOTS = 4


def buffer(workgroups, events):
    """A trace buffer as the kernels write it: events (workgroup, role, n, kind, ns, sm, fields)."""
    words = torch.zeros(workgroups * trace.ROLES * SLOTS * trace.WORDS, dtype=torch.int64)
    for w, role, n, kind, ns, sm, fields in events:
        i = ((w * trace.ROLES + role) * SLOTS + n) * trace.WORDS
        words[i:i + trace.WORDS] = torch.tensor([ns & 0xFFFFFFFF, ns >> 32, kind | role << 8 | sm << 16, w, *fields])
    return (words - (words >= 2 ** 31).long() * 2 ** 32).to(torch.int32)  # as the int32 buffer holds them


def tile(w, role, n, start, end, blocks, q_wait=0, k_wait=0, k_first=0, cycles=None, m_block=None):
    """A consumer's n-th tile (m block n of head 5 unless given), from start to end (ns), of `blocks` key blocks."""
    cycles = 2 * (end - start) if cycles is None else cycles
    m_block = n if m_block is None else m_block
    return [(w, role, 2 * n, trace.FWD_BEGIN, start, w, (0, 5 << 16 | m_block, blocks, q_wait)),
            (w, role, 2 * n + 1, trace.FWD_END, end, w, (cycles, k_first, blocks, k_wait))]


def test_decode_reads_the_kernels_layout_and_skips_empty_slots():
    ns = 3 << 32 | 0xFFFFFFF0  # both timer words, the low one past int32
    events = trace.decode(buffer(2, [(1, 2, 3, trace.FWD_END, ns, 131, (7, 8, 9, 0xFFFFFFFF))]), SLOTS)
    assert events == [trace.Event(ns, trace.FWD_END, 2, 131, 1, 3, (7, 8, 9, 0xFFFFFFFF))]


def test_fwd_summary_fits_tile_times_and_finds_the_tail():
    # Tiles take 1000 ns + 250 ns a block; worker 1 starts 500 ns late and ends 500 ns early.
    events = (tile(0, 0, 0, 0, 2000, 4, q_wait=3000, k_first=600) + tile(0, 0, 1, 2000, 3500, 2, k_wait=1000)
              + tile(1, 0, 0, 500, 3000, 6, k_wait=400, m_block=2))
    s = trace.summarize_fwd(trace.decode(buffer(2, events), SLOTS))
    assert s["span_us"] == pytest.approx(3.5)
    assert (s["tiles"], s["items"], s["workers"], s["consumer_tiles"]) == (3, 3, 2, 3)
    assert s["idle_start"] == pytest.approx(500 / 7000)
    assert s["idle_end"] == pytest.approx(500 / 7000)
    assert s["tile_fixed_us"] == pytest.approx(1.0)
    assert s["block_us"] == pytest.approx(0.25)
    assert s["k_wait_share"] == pytest.approx(2000 / (2 * 6000))
    assert s["q_wait_kcycles_per_tile"] == pytest.approx(1.0)
    assert s["k_first_kcycles_per_tile"] == pytest.approx(0.2)
    assert s["clock_ghz"] == pytest.approx(2.0)
    # Every tile is head 5 of batch 0: (2000 + 1500 + 2500) ns over 12 blocks.
    assert s["head_block_us"] == pytest.approx([0.5, 0.5, 0.5])


def test_fwd_summary_spreads_the_heads_block_times():
    slow = [(w, r, n, k, ns, sm, (f[0], 7 << 16, *f[2:]) if k == trace.FWD_BEGIN else f)
            for w, r, n, k, ns, sm, f in tile(0, 0, 1, 1000, 3000, 2)]
    s = trace.summarize_fwd(trace.decode(buffer(1, tile(0, 0, 0, 0, 1000, 2) + slow), SLOTS))
    assert s["head_block_us"] == pytest.approx([0.5, 0.75, 1.0])


def test_fwd_summary_counts_a_tile_once_over_its_consumers():
    events = tile(0, 0, 0, 0, 1000, 2) + tile(0, 1, 0, 100, 1100, 2) + tile(0, 2, 0, 200, 1200, 2)
    s = trace.summarize_fwd(trace.decode(buffer(1, events), SLOTS))
    assert (s["tiles"], s["consumer_tiles"]) == (1, 3)


def test_fwd_summary_counts_a_split_tile_once_over_its_pieces():
    # Tile 7's keys in two pieces, on two workers (a split last round: kernels/tail_split.h).
    events = tile(0, 0, 0, 0, 1000, 4) + tile(0, 0, 1, 1000, 1500, 2, m_block=7) + tile(1, 0, 0, 0, 500, 2, m_block=7)
    s = trace.summarize_fwd(trace.decode(buffer(2, events), SLOTS))
    assert (s["tiles"], s["items"], s["workers"]) == (2, 3, 2)


def test_fwd_summary_says_when_events_are_missing():
    events = tile(0, 0, 0, 0, 1000, 2)[:1] + tile(0, 0, 1, 1000, 2000, 2)
    with pytest.raises(RuntimeError, match="2 tile starts against 1 ends"):
        trace.summarize_fwd(trace.decode(buffer(1, events), SLOTS))


def workgroup(w, sm, start, ends, steps):
    """A backward workgroup on `sm`: its start and each consumer's end (ns)."""
    role = trace.WORKGROUP_ROLE
    return ([(w, role, 0, trace.BWD_BEGIN, start, sm, (steps, w, 0, 0)),
             (w, role, 1, trace.BWD_PRODUCER_END, start + 10, sm, (steps, w, 0, 0))]
            + [(w, c, 0, trace.BWD_CONSUMER_END, e, sm, (steps, w, 0, 0)) for c, e in enumerate(ends)])


def test_bwd_summary_measures_gaps_between_workgroups_on_an_sm():
    # 500 ns + 100 ns a step; on SM 0 the second workgroup starts 200 ns after the first one's
    # last consumer; SM 1 runs one and then idles.
    events = (workgroup(0, 0, 0, (1400, 1500), 10) + workgroup(1, 0, 1700, (2700, 2700), 5)
              + workgroup(2, 1, 0, (1000, 1100), 6))
    s = trace.summarize_bwd(trace.decode(buffer(3, events), SLOTS))
    assert (s["workgroups"], s["sms"]) == (3, 2)
    assert s["span_us"] == pytest.approx(2.7)
    assert s["gap_us"] == pytest.approx(0.2)
    assert s["gap_share"] == pytest.approx(200 / (2 * 2700))
    assert s["idle_end"] == pytest.approx(1600 / (2 * 2700))
    assert s["workgroup_fixed_us"] == pytest.approx(0.5)
    assert s["step_us"] == pytest.approx(0.1)


def test_bwd_summary_says_when_a_workgroup_has_no_end():
    events = workgroup(0, 0, 0, (100,), 1) + workgroup(1, 0, 200, (), 1)
    with pytest.raises(RuntimeError, match="2 workgroup starts against 1 ends"):
        trace.summarize_bwd(trace.decode(buffer(2, events), SLOTS))


def test_fit_of_constant_xs_has_no_intercept():
    assert trace.fit([4, 4], [1.0, 3.0]) == (None, 0.5)


def test_a_default_build_records_no_trace():
    from chiplet_fa import _C

    assert chiplet_fa.build_info()["trace"] is False
    with pytest.raises(RuntimeError, match="CHIPLET_FA_TRACE=1"):
        _C._trace_set(0, 0, 0)


def test_the_layout_constants_are_the_headers():
    import re

    header = (ROOT / "csrc" / "kernels" / "trace.h").read_text()
    constant = {name: int(v) for name, v in re.findall(r"\b(k\w+) = (\d+)", header)}
    assert (constant["kTraceWords"], constant["kTraceRoles"], constant["kTraceWorkgroup"]) == (
        trace.WORDS, trace.ROLES, trace.WORKGROUP_ROLE)
    assert (constant["kFwdTileBegin"], constant["kFwdTileEnd"], constant["kBwdBegin"], constant["kBwdConsumerEnd"],
            constant["kBwdProducerEnd"]) == (trace.FWD_BEGIN, trace.FWD_END, trace.BWD_BEGIN,
                                             trace.BWD_CONSUMER_END, trace.BWD_PRODUCER_END)


def test_markdown_has_a_row_a_pass_for_each_shape_and_mapping():
    fwd = trace.summarize_fwd(trace.decode(buffer(1, tile(0, 0, 0, 0, 1000, 2)), SLOTS))
    bwd = trace.summarize_bwd(trace.decode(buffer(1, workgroup(0, 0, 0, (900, 1000), 4)), SLOTS))
    rows = [{"shape": "8,16,16,2048,64,causal", "mapping": m, "fwd": fwd, "bwd": bwd}
            for m in ("head_first", "block_first")]
    md = trace.markdown({"command": "python tools/probes/trace.py", "tree": "abc1234", "gpu": "GPU", "clocks": None,
                         "rows": rows})
    assert sum(line.startswith("| 8,16,16,2048,64,causal | ") for line in md.splitlines()) == 4
    assert "0.500 / 0.500 / 0.500" in md
    assert "| - | 0.500 |" in md and "| - | 0.250 |" in md  # one tile, one workgroup: no fixed part to fit
