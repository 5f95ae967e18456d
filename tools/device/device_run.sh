#!/usr/bin/env bash
# One run on a GPU machine: install chiplet_fa as a user would (`pip install --no-build-isolation .`, the
# image's default compiler and no variables: the build targets the visible GPU), then run the
# stages named as arguments, in order:
#   errors    a bad input in a fresh process must raise ValueError (the static-libstdc++ crash)
#   smoke     the smoke sweep (tests/test_gpu_smoke.py) on the family the device runs (sm90 on an H200)
#   mma_sync  the same sweep with CHIPLET_FA_KERNEL=mma_sync: the other family in the same .so
#   tests     pytest -m gpu with the "device" hypothesis profile
#   sanitize  compute-sanitizer memcheck, racecheck, synccheck on representative shapes (SANITIZE_TOOLS,
#             SANITIZE_ARGS="--only 4": some tools, some cases of tools/device/sanitize_cases.py)
#   families  tools/probes/families.py: each kernel family of the installed .so against SDPA (FAMILIES_ARGS)
#   bench     bench/fwd.py (full sweep; BENCH_ARGS overrides)
#   l2        tools/l2/l2_measure.py under Nsight Compute (L2_ARGS)
#   l2bwd     tools/l2/bwd_l2_measure.py: the backward main pass's L2 hits, atomic and deterministic dQ
#   bwd       bench/bwd.py (BWD_ARGS)
#   varlen    bench/varlen.py
#   decode    bench/decode.py: KV-cache decoding against SDPA (DECODE_ARGS, e.g. --quick)
#   kernels   tools/probes/kernel_times.py (KT_ARGS, e.g. "--graph --settle-ms 1000 --shapes ..."), with an
#             nvidia-smi trace of power and SM clock every 200 ms beside it (smi_kernels.csv)
#   models    bench/models.py: transformers models with chiplet_fa vs SDPA (needs transformers; MODELS_ARGS)
#   profile   Nsight Compute stall breakdown of one sm90 forward and backward launch + the forward's SASS
#             (PROFILE_SHAPE, PROFILE_CAUSAL, PROFILE_MAPPING, PROFILE_BWD="atomic det" or none: see the stage)
#   trace     tools/probes/trace.py: when each SM ran which tile (TRACE_ARGS="--shapes ... --mappings ..."); needs a
#             traced build: CHIPLET_FA_TRACE=1 (with a reduced set) in the call's environment
# From the repository's root: bash tools/device/device_run.sh errors smoke tests
# Reduced builds: CHIPLET_FA_DTYPES=bf16 CHIPLET_FA_HDIMS=128 bash tools/device/device_run.sh smoke
# A second call on the same machine: SKIP_BUILD=1 bash tools/device/device_run.sh tests sanitize
# Pending changes first: APPLY="/path/a.patch /path/b.patch" bash tools/device/device_run.sh tests
# A copy of the tree without git: CHIPLET_FA_TREE=<revision> names the tree in the benchmarks' JSON.
# A wheel file instead of a build from the tree: WHEEL=dist/chiplet_fa-...whl bash tools/device/device_run.sh tests
# Results go to $OUT/results.tgz ($OUT/$ARCHIVE.tgz with ARCHIVE set: one archive, so that a transfer
# that takes few files brings everything back), packed again after every stage: a call cut off at a
# time limit still brings back the stages it finished.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/shared.sh"
[[ " $* " == *" tests "* ]] && refuse_one_dtype device_run.sh "the tests stage"
FINAL=${OUT:-/tmp/chiplet_fa_out}
mkdir -p "$FINAL"
OUT=$(mktemp -d /tmp/device_run.XXXXXX)  # the stages write here; $FINAL holds only the archive
ARCHIVE=${ARCHIVE:-results}  # two runs writing to one OUT: name the first's (ARCHIVE=checks) or the second replaces it
pack() { tar czf "$FINAL/$ARCHIVE.tgz.part" -C "$OUT" . && mv "$FINAL/$ARCHIVE.tgz.part" "$FINAL/$ARCHIVE.tgz"; }
trap pack EXIT
export PYTHONUNBUFFERED=1
status=0
stage() { echo "=== $1 ($(date +%T))"; }

stage build
for p in ${APPLY:-}; do apply_patch "$p" && echo "applied $p" || { echo "$p does not apply to the tree"; exit 1; }; done
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
cxx=${CXX:-c++}
echo "CXX=${CXX:-unset}; shared libstdc++ of $cxx: $($cxx -print-file-name=libstdc++.so); static: $($cxx -print-file-name=libstdc++.a)" \
  | tee "$OUT/toolchain.txt"
start=$SECONDS
# SKIP_BUILD=1 on a machine still warm from the previous call keeps the package it installed (the
# copied tree's fresh timestamps would make ninja rebuild everything).
if [ "${SKIP_BUILD:-0}" = 1 ] && (cd /tmp && python3 -c "import chiplet_fa._C") 2>/dev/null; then
  echo "install: skipped (SKIP_BUILD=1, package already installed)"
elif [ -n "${WHEEL:-}" ]; then
  # A wheel built elsewhere (the one file CI tests under other torch versions), installed as a user would.
  python3 -m pip install --no-deps --force-reinstall "$WHEEL" > "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
  echo "install: $(basename "$WHEEL") in $((SECONDS - start)) s"
else
  python3 -m pip install -v --no-build-isolation --no-deps . > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
  echo "install: $((SECONDS - start)) s"
fi
[ -f "$OUT/build.log" ] && grep -E "chiplet_fa: building|compiler identification|check_cxx_runtime" "$OUT/build.log"
[ -f "$OUT/build.log" ] && python3 tools/sass/ptxas_summary.py "$OUT/build.log" > "$OUT/ptxas.txt" \
  --title "ptxas of the installed build (tools/device/device_run.sh build log): spill bytes and registers per kernel"
cd /tmp  # from here on the installed package, not the source tree, is imported
so=$(python3 -c "import chiplet_fa._C as c; print(c.__file__)")
echo "libstdc++ locale units defined in _C.so: $(nm "$so" | grep -c locale_inst)"
# The device code's archs from the ELF list (disassembling the whole .so to count HGMMA took ~100 s).
echo "device code: $(cuobjdump -lelf "$so" | grep -oE 'sm_[0-9]+a?' | sort | uniq -c | tr '\n' ' ')"
chiplet-fa --version | tee "$OUT/build_info.txt"
cd - > /dev/null

for s in "$@"; do
  pack  # what the previous stages (or the build) wrote
  stage "$s"
  case $s in
    errors) python3 -P -m pytest tests/test_errors.py -q -k "fresh_process" 2>&1 | tee "$OUT/errors.log" | tail -3 || status=1 ;;
    # A kernel that hangs must not take the whole call: stages that launch new kernels are timed.
    smoke) timeout ${SMOKE_TIMEOUT:-300} $SMOKE_SWEEP 2>&1 | tee "$OUT/smoke.log" | tail -3 || status=1 ;;
    mma_sync) CHIPLET_FA_KERNEL=mma_sync timeout ${SMOKE_TIMEOUT:-300} $SMOKE_SWEEP \
                > "$OUT/smoke_mma_sync.log" 2>&1 || status=1
              tail -1 "$OUT/smoke_mma_sync.log" ;;
    tests) HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-device} timeout ${TEST_TIMEOUT:-300} python3 -P -m pytest ${TESTS:-tests} -q -m gpu --maxfail=10 2>&1 | tee "$OUT/tests.log" | tail -15 || status=1 ;;
    sanitize)
      for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
        timeout ${SANITIZE_TIMEOUT:-300} compute-sanitizer --tool $tool --error-exitcode 9 python3 tools/device/sanitize_cases.py ${SANITIZE_ARGS:-} \
          > "$OUT/sanitize_$tool.log" 2>&1 || status=1
        echo "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitize_$tool.log" | tail -1)"
      done ;;
    families) python3 tools/probes/families.py --out "$OUT" ${FAMILIES_ARGS:-} 2>&1 | tee "$OUT/families.log" | tail -20 || status=1 ;;
    bench) timeout ${BENCH_TIMEOUT:-400} python3 bench/fwd.py --out "$OUT" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" | tail -30 || status=1 ;;
    kernels)
      nvidia-smi --query-gpu=timestamp,power.draw,clocks.sm,temperature.gpu --format=csv -lms 200 > "$OUT/smi_kernels.csv" &
      smi=$!
      timeout ${KT_TIMEOUT:-300} python3 tools/probes/kernel_times.py --out "$OUT" ${KT_ARGS:---shapes 8,16,16,2048,64,causal} \
        2>&1 | tee "$OUT/kernel_times.log" | grep -E "us of kernels" || status=1
      kill $smi ;;
    l2) python3 tools/l2/l2_measure.py --out "$OUT" ${L2_ARGS:---block-n 128 --wgs-per-cu 1} 2>&1 | tee "$OUT/l2.log" | tail -20 || status=1 ;;
    l2bwd) python3 tools/l2/bwd_l2_measure.py --out "$OUT" 2>&1 | tee "$OUT/l2bwd.log" | tail -12 || status=1 ;;
    profile)
      # Nsight Compute on one launch each of the sm90 forward and backward main pass (bf16, the
      # plain variants; PROFILE_SHAPE="B,H_q,H_kv,N" default 1,128,128,8192, PROFILE_HDIM default
      # 128, PROFILE_CAUSAL=1 for the causal mask, PROFILE_MAPPING default head_first, or several) and the
      # forward's SASS. PROFILE_BWD names the backward's modes, each a report of its own: "atomic"
      # (default) and/or "det" (the deterministic mode: fixed-point dQ), or "none".
      ncu_sections="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats \
        --section SchedulerStats --section SourceCounters \
        --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
      IFS=, read -r pb phq phkv pn <<< "${PROFILE_SHAPE:-1,128,128,8192}"
      pcausal=$([ "${PROFILE_CAUSAL:-0}" = 1 ] && echo True || echo False)
      phd=${PROFILE_HDIM:-128}
      pmap=${PROFILE_MAPPING:-head_first}
      pfirst=${pmap%% *}  # the mapping the backward and the setup's forward run
      setup="import torch, chiplet_fa
q, do = (torch.randn($pb, $pn, $phq, $phd, device='cuda', dtype=torch.bfloat16) for _ in range(2))
k, v = (torch.randn($pb, $pn, $phkv, $phd, device='cuda', dtype=torch.bfloat16) for _ in range(2))
o, lse = torch.ops.chiplet_fa.fwd(q, k, v, None, $pcausal, '$pfirst', 8)"
      # Several mappings ("block_first head_first"): a forward report each, profile_fwd_<mapping>.
      profiles=()
      for m in $pmap; do
        name=profile_fwd; [ "$pmap" = "$m" ] || name=profile_fwd_$m
        profiles+=("$name")
        ncu --kernel-name regex:fwd_kernel --launch-skip 1 --launch-count 1 $ncu_sections -o "$OUT/$name" \
          python3 -P -c "$setup
for _ in range(2): torch.ops.chiplet_fa.fwd(q, k, v, None, $pcausal, '$m', 8)
torch.cuda.synchronize()" > /dev/null 2>&1 || status=1
      done
      for mode in ${PROFILE_BWD:-atomic}; do
        case $mode in
          atomic) name=profile_bwd det=False ;;
          det) name=profile_bwd_det det=True ;;
          none) continue ;;
          *) echo "PROFILE_BWD: unknown mode $mode (atomic, det, none)"; status=1; continue ;;
        esac
        profiles+=("$name")
        ncu --kernel-name regex:bwd_kv_kernel --launch-skip 1 --launch-count 1 $ncu_sections -o "$OUT/$name" \
          python3 -P -c "$setup
for _ in range(2): torch.ops.chiplet_fa.bwd(do, q, k, v, o, lse, None, $pcausal, '$pfirst', 8, $det)
torch.cuda.synchronize()" > /dev/null 2>&1 || status=1
      done
      for f in "${profiles[@]}"; do
        ncu -i "$OUT/$f.ncu-rep" > "$OUT/$f.txt" 2>&1
        # Warp-state samples per SASS instruction: which instructions the stalls sit on.
        ncu -i "$OUT/$f.ncu-rep" --page source --print-source sass --csv > "$OUT/${f}_sass.csv" 2>&1
        python3 tools/sass/ncu_sass_top.py "$OUT/${f}_sass.csv" --top 25 > "$OUT/${f}_top.txt" 2>&1
      done
      pwin=$([ "$pcausal" = True ] && echo 1 || echo 0)  # a causal mask runs the windowed kernel
      fwd_sym="sm9015fwd_kernel_sm90ILNS_5DTypeE1ELi${phd}ELb${pwin}ELb1E"  # sm90::fwd_kernel_sm90<bf16, D, windowed?, plain>
      cuobjdump -sass "$so" | awk -v s="$fwd_sym" '$0 ~ "Function : .*" s {p=1; print; next} p && /Function : / {p=0} p' \
        > "$OUT/sass_fwd_hdim$phd.txt"
      for f in "${profiles[@]}"; do
        echo "-- $f"
        grep -E "Issued Ipc|No Eligible|Compute \(SM\) Throughput|Memory Throughput|Warp Cycles Per Issued|stalled" \
          "$OUT/$f.txt" | awk '!/stalled/ || $NF > 0.05' | sed 's/smsp__average_warps_issue_stalled_//' | head -30
        # each table's first 5 rows from the top-25 file (parsing the CSV again took seconds)
        awk 'NR > 1 && /^[^ ]/ {if ($NF ~ /^[0-9]+$/ && $NF > 5) $NF = 5; print; n = 0; next} /^  / && n++ < 5' "$OUT/${f}_top.txt"
      done
      echo "forward SASS: $(grep -c '^ */\*[0-9a-f]*\*/' "$OUT/sass_fwd_hdim$phd.txt") instructions" ;;
    bwd) timeout ${BWD_TIMEOUT:-400} python3 bench/bwd.py --out "$OUT" ${BWD_ARGS:-} 2>&1 | tee "$OUT/bwd.log" | tail -20 || status=1 ;;
    varlen) python3 bench/varlen.py --out "$OUT" 2>&1 | tee "$OUT/varlen.log" | tail -20 || status=1 ;;
    decode) timeout ${DECODE_TIMEOUT:-400} python3 bench/decode.py --out "$OUT" ${DECODE_ARGS:-} 2>&1 | tee "$OUT/decode.log" \
              | tail -40 || status=1 ;;
    trace) timeout ${TRACE_TIMEOUT:-300} python3 tools/probes/trace.py --out "$OUT" ${TRACE_ARGS:---shapes 8,16,16,2048,64,causal} 2>&1 \
             | tee "$OUT/trace.log" | tail -25 || status=1 ;;
    models) timeout ${MODELS_TIMEOUT:-580} python3 bench/models.py --out "$OUT" ${MODELS_ARGS:-} 2>&1 | tee "$OUT/models.log" | tail -25 || status=1 ;;
    *) echo "unknown stage $s"; status=1 ;;
  esac
done
exit $status  # the EXIT trap packs the last stage
