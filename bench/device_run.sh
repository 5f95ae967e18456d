#!/usr/bin/env bash
# One device call: build for sm_90, then the stages named as arguments, in order:
#   smoke     bench/gpu_smoke.py (fast kernel correctness sweep)
#   mma_sync  the smoke sweep on a second build for sm_90 (no "a"): the mma.sync forward kernel
#   tests     pytest -m gpu with the "device" hypothesis profile
#   sanitize  compute-sanitizer memcheck, racecheck, synccheck on representative shapes
#   bench     bench/fwd.py (full sweep; BENCH_ARGS overrides)
#   l2        bench/l2_measure.py under Nsight Compute
#   bwd       bench/bwd.py
#   profile   Nsight Compute stall breakdown of one forward launch + its SASS (kernel tuning)
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
    # A kernel that hangs must not take the whole call: stages that launch new kernels are timed.
    smoke) timeout ${SMOKE_TIMEOUT:-300} python3 bench/gpu_smoke.py 2>&1 | tee "$OUT/smoke.log" | tail -15 || status=1 ;;
    mma_sync)
      cp "$so" /tmp/chiplet_fa_sm90a.so
      CHIPLET_FA_CUDA_ARCHS=90 MAX_JOBS=${MAX_JOBS:-16} python3 setup.py build_ext --inplace \
        --build-temp build_sm90 > "$OUT/build_sm90.log" 2>&1 || { tail -20 "$OUT/build_sm90.log"; status=1; }
      echo "SASS: $(cuobjdump -sass "$so" | grep -oE 'HGMMA|HMMA|LDSM' | sort | uniq -c | tr '\n' ' ')"
      timeout ${SMOKE_TIMEOUT:-300} python3 bench/gpu_smoke.py > "$OUT/smoke_mma_sync.log" 2>&1 || status=1
      tail -1 "$OUT/smoke_mma_sync.log"
      cp /tmp/chiplet_fa_sm90a.so "$so" ;;
    tests) HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-device} timeout ${TEST_TIMEOUT:-300} python3 -m pytest tests -q -m gpu --maxfail=10 2>&1 | tee "$OUT/tests.log" | tail -15 || status=1 ;;
    sanitize)
      for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
        compute-sanitizer --tool $tool --error-exitcode 9 python3 bench/sanitize_cases.py \
          > "$OUT/sanitize_$tool.log" 2>&1 || status=1
        echo "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitize_$tool.log" | tail -1)"
      done ;;
    bench) python3 bench/fwd.py --out "$OUT" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" | tail -30 || status=1 ;;
    l2) python3 bench/l2_measure.py --out "$OUT" ${L2_ARGS:---block-n 128 --wgs-per-cu 1} 2>&1 | tee "$OUT/l2.log" | tail -20 || status=1 ;;
    profile)
      ncu --kernel-name regex:fwd_kernel --launch-skip 1 --launch-count 1 --section SpeedOfLight \
        --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
        --section SourceCounters --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' python3 -c "import torch, chiplet_fa
q, k, v = (torch.randn(1, 8192, 128, 128, device='cuda', dtype=torch.bfloat16) for _ in range(3))
for _ in range(2): torch.ops.chiplet_fa.fwd(q, k, v, None, False, 'head_first', 8)
torch.cuda.synchronize()" > "$OUT/profile.txt" 2>&1 || status=1
      cuobjdump -sass "$so" | awk '/Function : .*fwd_kernel.*Li128ELb0/{p=1} p&&/Function : /&&!/fwd_kernel.*Li128ELb0/{p=0} p' \
        > "$OUT/sass_fwd_hdim128.txt"
      grep -E "Issued Ipc|Eligible|Throughput|Warp Cycles Per Issued|stalled" "$OUT/profile.txt" \
        | awk '!/stalled/ || $NF > 0.05' | sed 's/smsp__average_warps_issue_stalled_//' | head -40 ;;
    bwd) timeout ${BWD_TIMEOUT:-400} python3 bench/bwd.py --out "$OUT" ${BWD_ARGS:-} 2>&1 | tee "$OUT/bwd.log" | tail -20 || status=1 ;;
    *) echo "unknown stage $s"; status=1 ;;
  esac
done
exit $status
