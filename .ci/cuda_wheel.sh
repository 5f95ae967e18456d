#!/usr/bin/env bash
# One CUDA wheel for every torch from 2.11 on, made as a user's CPU-only build machine (or a slim
# CUDA image) makes it: torch 2.14.1's CUDA build for the stable headers and libtorch_cpu, this
# machine's nvcc, no GPU. A reduced instantiation set (bf16, head dim 128) keeps it short; every
# family and architecture of the wheel set is built. Then, on that one file:
#   - its name (+cu<major>, cp310-abi3) and what _C links (tools/check_abi.py: torch's C shim,
#     CPython's stable ABI and the runtimes only);
#   - its device code (sm_80 SASS with mma.sync, sm_90a SASS with wgmma, PTX for newer GPUs);
#   - installed into fresh venvs with the oldest torch it supports (2.11.0) and the newest here
#     (2.14.1), the CPU test suite in each (the GPU machines run the GPU tests on such a file).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build="$CI_VENVS/cuda-build" dist="$CI_VENVS/dist"
python3 -m venv "$build"
"$build/bin/pip" install -q torch==2.14.1 setuptools wheel ninja "cmake>=3.24" nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm
tools=$(echo "$build"/lib/python3*/site-packages/nvidia/cu*/bin)
export PATH="$build/bin:$tools:$PATH"

CHIPLET_FA_DTYPES=bf16 CHIPLET_FA_HDIMS=128 pip wheel -q --no-build-isolation --no-deps . -w "$dist"
wheel=$(ls "$dist"/chiplet_fa-*.whl)
echo "wheel: $(basename "$wheel")"
major=$(nvcc --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
[[ $(basename "$wheel") == chiplet_fa-*+cu$major-cp310-abi3-linux_$(uname -m).whl ]] || { echo "wrong wheel name"; exit 1; }
python3 tools/check_abi.py "$wheel"

unpacked=$(mktemp -d -p "$CI_VENVS")
python -m zipfile -e "$wheel" "$unpacked"
so=$(ls "$unpacked"/chiplet_fa/_C*.so)
sass() { cuobjdump -sass -arch "$1" "$so" | { grep -oE "$2" || true; } | wc -l; }
hmma80=$(sass sm_80 HMMA) hgmma90a=$(sass sm_90a HGMMA) hgmma80=$(sass sm_80 HGMMA)
ptx=$(cuobjdump -lptx "$so" | grep -c "sm_90" || true)
echo "sm_80: $hmma80 HMMA, $hgmma80 HGMMA; sm_90a: $hgmma90a HGMMA; sm_90 PTX files: $ptx"
[ "$hmma80" -gt 0 ] && [ "$hgmma90a" -gt 0 ] && [ "$hgmma80" -eq 0 ] && [ "$ptx" -gt 0 ] \
  || { echo "the wheel lacks the expected device code"; exit 1; }
rm -rf "$unpacked"

# The same file under two torch versions: a fresh venv with the oldest, the build venv with the newest.
# `pytest` from the checkout's root imports the installed package (.ci/cpu_tests.sh says why).
cpu_tests() {
  local venv=$1
  (cd /tmp && "$venv/bin/chiplet-fa" --version | sed -n 1,3p)
  "$venv/bin/pytest" tests -q -rfE -p no:cacheprovider | { grep -E "^(FAILED|ERROR) | (passed|failed)" || true; }
  return "${PIPESTATUS[0]}"
}
oldest="$CI_VENVS/torch-oldest"
python3 -m venv "$oldest"
"$oldest/bin/pip" install -q torch==2.11.0 pytest hypothesis numpy
"$oldest/bin/pip" install -q --no-deps "$wheel"
echo "--- the wheel under torch $("$oldest/bin/python" -c 'import torch; print(torch.__version__)')"
cpu_tests "$oldest"
rm -rf "$oldest"
"$build/bin/pip" install -q pytest hypothesis numpy
"$build/bin/pip" install -q --no-deps "$wheel"
echo "--- the wheel under torch $("$build/bin/python" -c 'import torch; print(torch.__version__)')"
cpu_tests "$build"
"$build/bin/pip" uninstall -q -y chiplet_fa  # hip_build.sh needs only the build venv's torch
