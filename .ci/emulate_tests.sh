#!/usr/bin/env bash
# The emulated CDNA3 backend (docs/emulator.md): its emulated install in
# a fresh virtual environment ($CI_VENVS/emulate), a CPU build compiled by clang-19 with
# CHIPLET_FA_EMULATE=cdna3, then the whole test suite against it: float16/bfloat16 calls on CPU
# tensors run the HIP kernels on the emulator (the tests' "emulated" device, and the CPU tests'
# half-precision draws), and the emulator's own tests and L2 trace comparison run. Then the tests
# marked `emulated` again on an AddressSanitizer build of the same (needs libclang-rt-19-dev).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python3 -m venv "$CI_VENVS/emulate"
. "$CI_VENVS/emulate/bin/activate"
# --- docs/emulator.md's install ---
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

# The emulator checks the copy path's global reads, not the kernels' plain loads and stores; the
# same build with AddressSanitizer checks every access against torch's allocations. Its library
# goes into a copy of the package, with clang's ASan runtime preloaded into Python.
start=$SECONDS
cmake -S . -B build/emulate-asan -G Ninja -DCMAKE_CXX_COMPILER=clang++-19 -DCHIPLET_FA_EMULATE=cdna3 \
  -DPython_EXECUTABLE="$(which python)" -DCMAKE_LIBRARY_OUTPUT_DIRECTORY="$PWD/build/emulate-asan/lib" \
  "-DCMAKE_CXX_FLAGS=-fsanitize=address -fno-omit-frame-pointer" -DCMAKE_MODULE_LINKER_FLAGS=-fsanitize=address >/dev/null
cmake --build build/emulate-asan -j "$MAX_JOBS" >/dev/null
asan_pkg="$(mktemp -d -p "$CI_VENVS")"
cp -r chiplet_fa "$asan_pkg/" && cp build/emulate-asan/lib/_C*.so "$asan_pkg/chiplet_fa/"
ASAN_OPTIONS=detect_leaks=0:halt_on_error=1 LD_PRELOAD="$(clang-19 -print-file-name=libclang_rt.asan-x86_64.so)" \
  PYTHONPATH="$asan_pkg" pytest tests -q -m emulated
echo "emulated tests under AddressSanitizer, with its build: $((SECONDS - start)) s"
