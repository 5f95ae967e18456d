"""bench/results/ and what cites it: every result file README.md, docs/, tools/, .ci/ and the results
themselves name exists (in the tree, or at the revision a citation gives), every committed table is
the one its benchmark's JSON files generate, and the folder stays small (a JSON per benchmark per
GPU, a table per benchmark, the correctness runs)."""
import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), RESULTS / "checks.md",
        *sorted(p for p in (ROOT / "tools").rglob("*") if p.suffix in (".md", ".py", ".sh")),
        *sorted(p for p in (ROOT / ".ci").rglob("*") if p.is_file())]
# What is cited: those files, and each result's note (its commands are quoted as they were run).
TEXTS = [(str(doc.relative_to(ROOT)), doc.read_text(errors="replace")) for doc in DOCS]
TEXTS += [(f"{p.relative_to(ROOT)} (note)", json.loads(p.read_text()).get("note") or "") for p in sorted(RESULTS.glob("*.json"))]
spec = importlib.util.spec_from_file_location("results_harness", ROOT / "bench" / "harness.py")
harness = importlib.util.module_from_spec(spec)
spec.loader.exec_module(harness)


def cited(pattern):
    """(file, match) of every citation in TEXTS."""
    return [(name, m) for name, text in TEXTS for m in re.finditer(pattern, text)]


@pytest.mark.parametrize("doc, path", [(d, m.group(1)) for d, m in cited(r"(?<![\w:/])bench/results/([\w.-]+\w)")])
def test_every_result_file_the_docs_name_exists(doc, path):
    assert (RESULTS / path).is_file(), f"{doc} cites bench/results/{path}"


def git(*args):
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)


@pytest.mark.skipif(shutil.which("git") is None or git("rev-parse").returncode != 0, reason="needs a git checkout")
@pytest.mark.parametrize("doc, rev, path",
                         [(d, m.group(1), m.group(2)) for d, m in cited(r"\b([0-9a-f]{7,40}):bench/results/([\w.-]+\w)")])
def test_every_removed_result_the_docs_name_is_at_its_revision(doc, rev, path):
    if git("cat-file", "-e", f"{rev}^{{commit}}").returncode != 0:
        pytest.skip(f"{rev} is not in this clone (a shallow one?)")
    assert git("cat-file", "-e", f"{rev}:bench/results/{path}").returncode == 0, f"{doc} cites {rev}:bench/results/{path}"


BENCHMARKS = sorted({json.loads(p.read_text())["benchmark"] for p in RESULTS.glob("*.json")})


@pytest.mark.parametrize("benchmark", BENCHMARKS)
def test_each_table_is_generated_from_its_benchmarks_json(benchmark):
    if benchmark == "models":
        pytest.importorskip("transformers")  # bench/models.py imports it
    assert harness.render_benchmark(RESULTS, benchmark) == (RESULTS / f"{benchmark}.md").read_text()


def test_results_are_a_json_per_gpu_and_a_table_per_benchmark():
    # <benchmark>_<gpu>.json (cpu.json), <benchmark>.md; the correctness runs (checks.md) have no JSON.
    assert {p.stem for p in RESULTS.glob("*.md")} == set(BENCHMARKS) | {"checks"}
    assert {p.suffix for p in RESULTS.iterdir()} == {".md", ".json"}
    for p in RESULTS.glob("*.json"):
        result = json.loads(p.read_text())
        assert p.stem == harness.file_stem(result), p.name


def test_at_most_20_result_files():
    assert len(list(RESULTS.iterdir())) <= 20, sorted(p.name for p in RESULTS.iterdir())


def markdown(result):
    """A table function for the test below (render loads it from this file, as from a benchmark's)."""
    return f"# demo table, {result['gpu']}\n\n## rows\n\n{result['rows']}\n"


def test_a_run_writes_its_json_and_generates_its_benchmarks_table_again(tmp_path):
    for gpu in ("NVIDIA H200", "NVIDIA H100 80GB HBM3"):
        result = {"benchmark": "demo", "command": "python bench/fwd.py --out DIR", "tree": "abc", "gpu": gpu,
                  "clocks": None, "rows": [gpu[-4:]]}
        assert harness.save_results(tmp_path, result, markdown) == markdown(result)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo.md", "demo_h100.json", "demo_h200.json"]
    md = (tmp_path / "demo.md").read_text()
    assert md == harness.render_benchmark(tmp_path, "demo")
    assert md.startswith("# demo results: NVIDIA H100 80GB HBM3, NVIDIA H200\n")
    assert md.index("## demo table, NVIDIA H100") < md.index("## demo table, NVIDIA H200") and "\n### rows\n" in md


def test_a_command_whose_script_moved_says_where_it_is_now():
    result = {"command": "python bench/l2_measure.py --out DIR", "tree": "1ae1c16", "markdown": "tools/l2/l2_measure.py"}
    assert harness.moved_script(result) == (" (run on tree 1ae1c16, where the script was `bench/l2_measure.py`; "
                                            "it is now `tools/l2/l2_measure.py`)")
    assert harness.moved_script(dict(result, command="python tools/l2/l2_measure.py --out DIR")) == ""
