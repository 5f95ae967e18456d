#!/usr/bin/env bash
# A CUDA wheel as a user's CPU-only build machine (or a slim CUDA image) makes it: torch 2.14.1's
# CUDA build and its nvidia packages, this machine's nvcc, no GPU. A reduced instantiation set
# (bf16, head dim 128) keeps it short; every family and architecture of the wheel set is built.
# Then: the wheel's tag, the device code in _C.so (sm_80 SASS with mma.sync, sm_90a SASS with
# wgmma, PTX for newer GPUs), and an install into a fresh venv that imports it and runs the CPU op.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build="$CI_VENVS/cuda-build" fresh="$CI_VENVS/cuda-fresh" dist="$CI_VENVS/dist"
python3 -m venv "$build"
"$build/bin/pip" install -q torch==2.14.1 setuptools wheel ninja "cmake>=3.24" nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm
tools=$(echo "$build"/lib/python3*/site-packages/nvidia/cu*/bin)
export PATH="$build/bin:$tools:$PATH"

CHIPLET_FA_DTYPES=bf16 CHIPLET_FA_HDIMS=128 pip wheel -q --no-build-isolation --no-deps . -w "$dist"
wheel=$(ls "$dist"/chiplet_fa-*.whl)
echo "wheel: $(basename "$wheel")"
py=$(python -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
[[ $(basename "$wheel") == chiplet_fa-*-$py-$py-linux_$(uname -m).whl ]] || { echo "wrong wheel tag"; exit 1; }

unpacked=$(mktemp -d -p "$CI_VENVS")
python -m zipfile -e "$wheel" "$unpacked"
so=$(ls "$unpacked"/chiplet_fa/_C*.so)
sass() { cuobjdump -sass -arch "$1" "$so" | { grep -oE "$2" || true; } | wc -l; }
hmma80=$(sass sm_80 HMMA) hgmma90a=$(sass sm_90a HGMMA) hgmma80=$(sass sm_80 HGMMA)
ptx=$(cuobjdump -lptx "$so" | grep -c "sm_90" || true)
echo "sm_80: $hmma80 HMMA, $hgmma80 HGMMA; sm_90a: $hgmma90a HGMMA; sm_90 PTX files: $ptx"
[ "$hmma80" -gt 0 ] && [ "$hgmma90a" -gt 0 ] && [ "$hgmma80" -eq 0 ] && [ "$ptx" -gt 0 ] \
  || { echo "the wheel lacks the expected device code"; exit 1; }

python3 -m venv "$fresh"
"$fresh/bin/pip" install -q torch==2.14.1 "$wheel"
(cd /tmp && "$fresh/bin/chiplet-fa" --version \
  && "$fresh/bin/python" -c 'import torch, chiplet_fa
q = torch.randn(1, 70, 4, 16)
out = chiplet_fa.attention(q, q, q, causal=True)
assert out.shape == q.shape and chiplet_fa.build_info()["backend"] == "cuda"
print("fresh venv: imported", chiplet_fa.__file__, "and ran the CPU path")')
rm -rf "$fresh" "$unpacked"  # hip_build.sh needs only the build venv's torch
