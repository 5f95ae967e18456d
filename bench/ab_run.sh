#!/usr/bin/env bash
# Kernel changes against the tree, in one device call. Installs the tree as device_run.sh does (a
# reduced instantiation set unless CHIPLET_FA_DTYPES / CHIPLET_FA_HDIMS say otherwise), runs the
# smoke sweep and the benchmark; then for each patch named as an argument (`git diff` output,
# relative to the tree): applies it, reinstalls (the build folder stays, so ninja recompiles only
# the units the patch touches), runs the same, and takes the patch out again. Each variant's
# benchmark has cuDNN in its own process: the variants compare by their "/ cuDNN" ratios.
#   AB_BENCH  the benchmark, given --out DIR (default: bench/fwd.py on issue #12's small shapes,
#             D=64 and D=128 at H=32 N=8K); AB_SMOKE_TIMEOUT the smoke sweep's limit (180 s)
#   bash bench/ab_run.sh bench/pending/v11a-diagonal-mask.patch bench/pending/v11b-uniform-desc.patch
# Results: $OUT/results.tgz, a folder per variant (0-tree, 1-<patch>, ...) with its logs and
# the benchmark's files; the table printed last has each variant's chiplet_fa TFLOP/s and ratio.
set -uo pipefail
OUT=${OUT:-/tmp/chiplet_fa_out}
mkdir -p "$OUT"
export CHIPLET_FA_DTYPES=${CHIPLET_FA_DTYPES:-bf16} CHIPLET_FA_HDIMS=${CHIPLET_FA_HDIMS:-64,128} PYTHONUNBUFFERED=1
bench=${AB_BENCH:-python3 bench/fwd.py --shapes 8,16,16,2048,64 4,32,8,4096,128 1,32,32,8192,128 1,32,32,8192,64}
status=0

variant() {
  local dir="$OUT/$1" start=$SECONDS
  mkdir -p "$dir"
  if ! python3 -m pip install -v --no-build-isolation --no-deps . > "$dir/build.log" 2>&1; then
    echo "$1: install failed"; tail -30 "$dir/build.log"; return 1
  fi
  echo "$1: install $((SECONDS - start)) s"
  # A variant that fails or hangs in the smoke sweep is not benchmarked: a hang must not take the call.
  if ! timeout -k 10 "${AB_SMOKE_TIMEOUT:-180}" python3 bench/gpu_smoke.py > "$dir/smoke.log" 2>&1; then
    echo "$1: smoke failed or timed out: $(tail -1 "$dir/smoke.log")"; return 1
  fi
  echo "$1: smoke: $(tail -1 "$dir/smoke.log")"
  timeout -k 10 400 $bench --out "$dir" > "$dir/bench.log" 2>&1 || { echo "$1: benchmark failed"; tail -5 "$dir/bench.log"; status=1; }
}

. "$(dirname "${BASH_SOURCE[0]}")/apply_patch.sh"

n=0
if variant 0-tree; then
  for p in "$@"; do
    n=$((n + 1))
    name="$n-$(basename "$p" .patch)"
    if ! apply_patch "$p"; then echo "$name: does not apply to the tree"; status=1; continue; fi
    variant "$name" || status=1
    apply_patch -R "$p" || { echo "$name: cannot be taken out again"; status=1; break; }
  done
else
  echo "the tree itself failed: no patch tried"; status=1
fi

python3 bench/ab_table.py "$OUT" | tee "$OUT/ab.md"
# The device tool returns few files: everything travels in one archive.
(cd "$OUT" && tar czf ../chiplet_fa_ab.tgz . && rm -rf ./* && mv ../chiplet_fa_ab.tgz results.tgz)
exit $status
