#!/usr/bin/env bash
# Registers and spills of every generated sm90-family kernel (the wgmma path), as ptxas reports
# them with the flags CMake uses; no GPU needed. Usage: bash bench/ptxas_report.sh > FILE
# (bench/device_run.sh writes the same table for the whole build it installs: $OUT/ptxas.txt.)
set -euo pipefail
cd "$(dirname "$0")/.."
for tu in csrc/kernels/instantiations/sm90/*.cu; do
  nvcc -std=c++20 -O3 --use_fast_math --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a \
    -Xptxas -v -I csrc -c "$tu" -o /dev/null 2>&1
done | python3 bench/ptxas_summary.py - \
  --title "nvcc $(nvcc --version | grep -oE 'release [0-9.]+'), sm_90a, -O3 --use_fast_math, sm90 family units" \
  --title "the sm90 kernels launch with 168 registers a thread and move them with setmaxnreg (producer / consumers)"
