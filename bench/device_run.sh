#!/usr/bin/env bash
# One device call: build for sm_90, then the stages named as arguments, in order:
#   smoke     bench/gpu_smoke.py (fast kernel correctness sweep)
#   tests     pytest -m gpu with the "device" hypothesis profile
#   sanitize  compute-sanitizer memcheck + racecheck on representative shapes
#   bench     bench/fwd.py (full sweep; BENCH_ARGS overrides)
#   l2        bench/l2_measure.py under Nsight Compute
#   bwd       bench/bwd.py
# Reduced builds: CHIPLET_FA_DTYPES=bf16 CHIPLET_FA_HDIMS=128 bash bench/device_run.sh smoke
# Results go to $OUT (the device tool brings them back).
set -uo pipefail
OUT=${OUT:-/tmp/chiplet_fa_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
status=0
stage() { echo "=== $1 ($(date +%T))"; }

stage build
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
build() {
  CHIPLET_FA_CUDA_ARCHS=${CHIPLET_FA_CUDA_ARCHS:-90a} MAX_JOBS=${MAX_JOBS:-16} \
    python3 setup.py build_ext --inplace > "$OUT/build.log" 2>&1
}
# The H200 image's default g++ (/opt/gcc, GCC 13.3) put a copy of libstdc++'s ostream code into
# _C.so, and the first formatted error message (c10::str of an integer) segfaulted in it; built
# by /usr/bin/g++ (also GCC 13.3) the .so defines none and the error tests pass (2026-11-29).
# Prefer the system compiler; fall back to the default one if it cannot build.
if [ -x /usr/bin/g++ ]; then
  export CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++
  build || { echo "system g++ failed, retrying with the default compiler"; unset CXX CUDAHOSTCXX; rm -rf build; }
fi
[ -f "$OUT/build.log" ] && grep -q "copying build" "$OUT/build.log" || build || { tail -40 "$OUT/build.log"; exit 1; }
grep -E "compiler identification" "$OUT/build.log"
grep -E "ptxas info.*(registers|spill)|Function properties for .*fwd_kernel" "$OUT/build.log" \
  | sed 's/ptxas info    : //' > "$OUT/ptxas.txt"
tail -3 "$OUT/build.log"
so=$(ls chiplet_fa/_C*.so)
echo "ostream code defined in _C.so: $(nm -C --defined-only "$so" | grep -c 'basic_ostream<char, std::char_traits<char> >::_M_insert<long>')"
echo "SASS: $(cuobjdump -sass "$so" | grep -oE 'HGMMA|HMMA|LDSM' | sort | uniq -c | tr '\n' ' ')"

for s in "$@"; do
  stage "$s"
  case $s in
    smoke) python3 bench/gpu_smoke.py 2>&1 | tee "$OUT/smoke.log" | tail -15 || status=1 ;;
    tests) HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-device} timeout ${TEST_TIMEOUT:-300} python3 -m pytest tests -q -m gpu --maxfail=10 2>&1 | tee "$OUT/tests.log" | tail -15 || status=1 ;;
    sanitize)
      for tool in memcheck racecheck; do
        compute-sanitizer --tool $tool --error-exitcode 9 python3 bench/sanitize_cases.py \
          > "$OUT/sanitize_$tool.log" 2>&1 || status=1
        echo "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitize_$tool.log" | tail -1)"
      done ;;
    bench) python3 bench/fwd.py --out "$OUT" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" | tail -30 || status=1 ;;
    l2) python3 bench/l2_measure.py --out "$OUT" ${L2_ARGS:---block-n 128 --wgs-per-cu 1} 2>&1 | tee "$OUT/l2.log" | tail -20 || status=1 ;;
    bwd) python3 bench/bwd.py --out "$OUT" ${BWD_ARGS:-} 2>&1 | tee "$OUT/bwd.log" | tail -20 || status=1 ;;
    *) echo "unknown stage $s"; status=1 ;;
  esac
done
exit $status
