#!/usr/bin/env bash
# Build the chiplet_fa wheel for AMD GPUs where a ROCm torch and ROCm's HIP compiler are installed
# (tools/rocm/Dockerfile runs it in a rocm/pytorch image; no GPU is needed):
#   pip wheel --no-build-isolation . for gfx942 and, when the compiler takes it, gfx950;
# then installs the wheel, checks that it was built for HIP and the architectures asked for, and
# that _C.so holds one code object with v_mfma per kernel unit and architecture.
#   bash tools/rocm/build_wheel.sh [OUT_DIR]      (default dist/; PYTORCH_ROCM_ARCH overrides)
# Never run by this project: no Docker engine or ROCm torch was available (docs/families.md, HIP build).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="$(mkdir -p "${1:-$root/dist}" && cd "${1:-$root/dist}" && pwd)"
rocm="${ROCM_PATH:-/opt/rocm}"
python - <<'PY'
import sys, torch
if not torch.version.hip:
    sys.exit(f"build_wheel: torch {torch.__version__} is not a ROCm build")
print(f"build_wheel: torch {torch.__version__}, HIP {torch.version.hip}")
PY

if [ -z "${PYTORCH_ROCM_ARCH:-}" ]; then
  probe=$(mktemp --suffix=.hip)
  printf '#include <hip/hip_runtime.h>\n__global__ void k() {}\n' >"$probe"
  PYTORCH_ROCM_ARCH=gfx942
  if "$rocm/bin/hipcc" --offload-arch=gfx950 -c "$probe" -o /dev/null 2>/dev/null; then
    PYTORCH_ROCM_ARCH="gfx942;gfx950"
  fi
  rm -f "$probe"
fi
export PYTORCH_ROCM_ARCH
echo "build_wheel: PYTORCH_ROCM_ARCH=$PYTORCH_ROCM_ARCH"

pip install -q setuptools wheel ninja "cmake>=3.24"
(cd "$root" && CHIPLET_FA_BUILD=hip pip wheel --no-build-isolation --no-deps -w "$out" .)
wheel=$(ls -t "$out"/chiplet_fa-*.whl | head -1)
echo "build_wheel: $wheel"

pip install -q --no-deps --force-reinstall "$wheel"
units=$(cd / && python - <<'PY'
import os
from chiplet_fa import _C
info = _C.build_info()  # raw: archs and instantiations as ';'-lists
assert info["backend"] == "hip", info
assert info["archs"] == os.environ["PYTORCH_ROCM_ARCH"], (info["archs"], os.environ["PYTORCH_ROCM_ARCH"])
kernels = [i for i in info["instantiations"].split(";") if i.startswith("cdna3/")]
print(2 * len(kernels))  # a full and a causal unit each
PY
)
(cd / && chiplet-fa --version)
so=$(cd / && python -c 'import chiplet_fa._C as c; print(c.__file__)')
LLVM_BIN="$rocm/llvm/bin" bash "$root/tools/rocm/check_code_objects.sh" "$so" "$units" ${PYTORCH_ROCM_ARCH//;/ }
