#!/usr/bin/env bash
# The README's CPU install and test commands, in a fresh virtual environment ($CI_VENVS/cpu), with the
# transformers extra so the transformers backend's tests run: the whole suite on the extra's lowest
# version (the one the GPU runs use), then the backend's tests again on its highest (about 20 s).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python3 -m venv "$CI_VENVS/cpu"
. "$CI_VENVS/cpu/bin/activate"
# --- the README's install section, CPU ---
pip install -q torch==2.13.0 setuptools wheel ninja "cmake>=3.24"
pip install -q --no-build-isolation ".[test,transformers]" "transformers==5.17.0"  # the H200 image's version
# --- end ---
(cd /tmp && python -c 'import chiplet_fa; print("installed:", chiplet_fa.__file__)')
(cd /tmp && chiplet-fa --version && chiplet-fa)
# `pytest`, not `python -m pytest`: the latter puts the checkout on sys.path, and its chiplet_fa/
# (no _C built there) would shadow the installed package.
report="$(mktemp -p "$CI_VENVS" --suffix=.xml)"
pytest tests -q -rs --junitxml="$report"
python - "$report" <<'PY'
import sys
import xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
count = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
passed = count["tests"] - count["failures"] - count["errors"] - count["skipped"]
print(f"{passed} passed, {count['failures'] + count['errors']} failed, {count['skipped']} skipped")
sys.exit(0 if passed > 0 and count["failures"] + count["errors"] == 0 else 1)
PY
# The other end of setup.py's transformers range (>=5.17,<5.26).
pip install -q "transformers==5.25.0"
pytest tests/test_transformers_backend.py -q
