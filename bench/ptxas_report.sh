#!/usr/bin/env bash
# Registers and spills of every generated sm90-family kernel (the wgmma path), as ptxas reports
# them with the flags CMake uses; no GPU needed. Usage: bash bench/ptxas_report.sh > FILE
set -euo pipefail
cd "$(dirname "$0")/.."
echo "# nvcc $(nvcc --version | grep -oE 'release [0-9.]+'), sm_90a, -O3 --use_fast_math, sm90 family units"
echo "# The forward kernel sets 168 registers per thread at launch (384 threads) and moves them"
echo "# with setmaxnreg: producer warpgroup 56, consumer warpgroups 224 (csrc/kernels/sm90/fwd_kernel.h)."
echo "# The backward's main pass (bwd_kv_kernel_sm90) does the same with 40 and 232"
echo "# (csrc/kernels/sm90/bwd_kernel.h): its spills, when reported, are in the producer warpgroup."
for tu in csrc/kernels/instantiations/sm90/*.cu; do
  echo "## $(basename "$tu")"
  nvcc -std=c++20 -O3 --use_fast_math --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a \
    -Xptxas -v -I csrc -c "$tu" -o /dev/null 2>&1 \
    | grep -E "Function properties|spill|Used" | sed -E 's/ptxas info +: //; s/^ +//'
done
