"""bench/results/ and what cites it: every result file README.md and docs/ name exists (in the tree,
or at the revision a citation gives), and every committed table is the one its JSON generates."""
import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
spec = importlib.util.spec_from_file_location("results_harness", ROOT / "bench" / "harness.py")
harness = importlib.util.module_from_spec(spec)
spec.loader.exec_module(harness)


def cited(pattern):
    """(doc name, match) of every citation in README.md and docs/*.md."""
    return [(doc.name, m) for doc in DOCS for m in re.finditer(pattern, doc.read_text())]


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


@pytest.mark.parametrize("result", sorted(RESULTS.glob("*.json")), ids=lambda p: p.name)
def test_each_table_is_generated_from_its_json(result):
    if json.loads(result.read_text())["benchmark"] == "models":
        pytest.importorskip("transformers")  # bench/models.py imports it
    assert harness.render(result) == result.with_suffix(".md").read_text()


def test_results_are_json_and_table_pairs():
    # The correctness runs are the only tables without a JSON.
    tables = {p.stem for p in RESULTS.glob("*.md")} - {"checks_h100", "checks_h200"}
    assert tables == {p.stem for p in RESULTS.glob("*.json")}
    assert {p.suffix for p in RESULTS.iterdir()} == {".md", ".json"}
