"""bench/harness.py's turns (time_in_turns) on the CPU, where it times by the wall clock: what is
called in which order, not how long anything takes."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("timing", ROOT / "bench" / "harness.py")
timing = importlib.util.module_from_spec(spec)
spec.loader.exec_module(timing)

pytestmark = pytest.mark.skipif(timing.torch.cuda.is_available(), reason="the wall-clock path (no GPU)")


def recorder(log, name):
    return lambda: log.append(name)


def test_columns_are_timed_in_turns():
    log = []
    times = timing.time_in_turns({"ours": recorder(log, "ours"), "peer": recorder(log, "peer")},
                                 rounds=3, total_ms=0.0)
    assert set(times) == {"ours", "peer"} and all(t >= 0 for t in times.values())
    # One warm-up each, then every round times each column once (total_ms 0: one call a round).
    assert log == ["ours", "peer"] + ["ours", "peer"] * 3


def test_rotated_rounds_start_one_column_later_each():
    log = []
    fns = {name: recorder(log, name) for name in ("a", "b", "c")}
    timing.time_in_turns(fns, rounds=4, total_ms=0.0, rotate=True)
    # Warm-ups in the given order, then rounds a b c, b c a, c a b, a b c.
    assert log == list("abc") + list("abc") + list("bca") + list("cab") + list("abc")
    assert "one column later" in timing.timing_note(True, 4, rotate=True)
    assert "one column later" not in timing.timing_note(True, 1, rotate=True)


def test_one_round_times_each_column_after_its_own_warm_up():
    log = []
    timing.time_in_turns({"ours": recorder(log, "ours"), "peer": recorder(log, "peer")}, total_ms=0.0)
    # The tables' method: warm-up, then at least three timed calls, column by column.
    assert log == ["ours"] * 4 + ["peer"] * 4


def test_a_column_that_did_not_run_times_as_none():
    log = []
    for rounds in (1, 2):
        log.clear()
        times = timing.time_in_turns({"ours": recorder(log, "ours"), "absent": None}, rounds=rounds, total_ms=0.0)
        assert times["absent"] is None and times["ours"] is not None
        assert log == ["ours"] * (4 if rounds == 1 else 3)


def test_an_error_in_a_timed_call_is_not_hidden():
    def fails():
        raise RuntimeError("a kernel failed")

    with pytest.raises(RuntimeError, match="a kernel failed"):
        timing.time_in_turns({"ours": fails}, rounds=2)


def test_timing_note_names_the_turns():
    assert "turns" not in timing.timing_note(True, 1)
    assert "5 turns" in timing.timing_note(False, 5)


def test_settling_runs_the_column_untimed_before_its_timing():
    log = []
    timing.time_in_turns({"ours": recorder(log, "ours")}, total_ms=0.0, settle_ms=1e-9)
    # Warm-up, one settling call (its time passes 1e-9 ms), then the three timed calls.
    assert log == ["ours"] * 5
    assert "of its own calls" in timing.timing_note(False, 1, 1000.0)


def test_options_from_the_command_line():
    import argparse
    ap = argparse.ArgumentParser()
    timing.add_timing_arguments(ap)
    opts = timing.timing_options(ap.parse_args(["--rounds", "3", "--settle-ms", "500", "--rotate",
                                                "--rest-ms", "800"]))
    assert opts == {"graph": True, "rounds": 3, "settle_ms": 500.0, "rotate": True, "rest_ms": 800.0}
    assert timing.timing_options(ap.parse_args([])) == {"graph": True, "rounds": 1, "settle_ms": 0.0,
                                                        "rotate": False, "rest_ms": 0.0}
    assert "800 ms of an idle GPU" in timing.timing_note(**opts)
    assert "idle" not in timing.timing_note(True)


def test_windows_cover_each_columns_timed_calls():
    log, windows = [], {}
    timing.time_in_turns({"ours": recorder(log, "ours"), "absent": None}, total_ms=0.0, windows=windows)
    assert list(windows) == ["ours"] and len(windows["ours"]) == 1  # a column that does not run has none
    (start, end), = windows["ours"]
    assert start <= end
    windows = {}
    timing.time_in_turns({"ours": recorder(log, "ours"), "peer": recorder(log, "peer")}, rounds=3, total_ms=0.0,
                         windows=windows)
    assert [len(windows[n]) for n in ("ours", "peer")] == [3, 3]  # one a round
