"""The --shapes grammar of bench/harness.py: every benchmark that takes shapes (fwd.py, bwd.py,
cpu.py) reads the same command line into the same runs, and a malformed shape is refused."""
import argparse
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load(path):
    spec = importlib.util.spec_from_file_location(f"shapes_{path.stem}", ROOT / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BENCHMARKS = [load(Path("bench") / f"{name}.py") for name in ("fwd", "bwd", "cpu")]
harness = load(Path("bench/harness.py"))


@pytest.mark.parametrize("argv, runs", [
    (["--shapes", "1,32,8,8192,128", "8,16,16,2048,64,causal"],
     [(1, 32, 8, 8192, 128, False), (1, 32, 8, 8192, 128, True), (8, 16, 16, 2048, 64, True)]),
    (["--shapes", "1,32,8,8192,128", "8,16,16,2048,64,causal", "--causal", "no"], [(1, 32, 8, 8192, 128, False)]),
    (["--shapes", "2,4,4,100,64,noncausal", "2,4,1,100,64", "--causal", "yes"], [(2, 4, 1, 100, 64, True)]),
])
@pytest.mark.parametrize("bench", BENCHMARKS, ids=lambda m: m.__name__.removeprefix("shapes_"))
def test_every_benchmark_reads_shapes_alike(bench, argv, runs):
    args = bench.parser().parse_args(argv + ["--out", "unused"])
    assert bench.runs(args) == runs


@pytest.mark.parametrize("text", ["1,32,8,8192", "1,32,8,8192,128,1", "1,32,6,8192,128", "1,x,8,8192,128",
                                  "0,32,8,8192,128"])
def test_malformed_shapes_are_refused(text):
    with pytest.raises(argparse.ArgumentTypeError):
        harness.parse_shape(text)


def test_default_sweeps_are_runs_of_the_grammar():
    # A mask fixed in a default shape holds under --causal both; the others run both ways.
    fwd = BENCHMARKS[0]
    runs = fwd.runs(fwd.parser().parse_args(["--quick", "--out", "unused"]))
    assert runs == [(1, 128, 128, 8192, 128, False), (1, 128, 128, 8192, 128, True), (1, 64, 8, 8192, 128, True),
                    (1, 128, 128, 8192, 64, False)]
