#!/usr/bin/env bash
# The emulated CDNA3 backend (README, "Emulated CDNA3 backend"): the README's emulated install in
# a fresh virtual environment ($CI_VENVS/emulate), a CPU build compiled by clang-19 with
# CHIPLET_FA_EMULATE=cdna3, then the whole test suite against it: float16/bfloat16 calls on CPU
# tensors run the HIP kernels on the emulator (the tests' "emulated" device, and the CPU tests'
# half-precision draws), and the emulator's own tests and L2 trace comparison run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python3 -m venv "$CI_VENVS/emulate"
. "$CI_VENVS/emulate/bin/activate"
# --- the README's emulated install ---
pip install -q torch==2.13.0 setuptools wheel ninja "cmake>=3.24"
CXX=clang++-19 CHIPLET_FA_EMULATE=cdna3 pip install -q --no-build-isolation ".[test]"
# --- end ---
(cd /tmp && python - <<'PY'
import chiplet_fa
info = chiplet_fa.build_info()
print("installed:", chiplet_fa.__file__, "backend:", info["backend"])
assert info["backend"] == "cpu (emulating cdna3)" and chiplet_fa.emulate.available(), info
PY
)
start=$SECONDS
pytest tests -q -rs
echo "emulated tests: $((SECONDS - start)) s"
