#!/usr/bin/env bash
# Kernel changes against the tree, in one run on a GPU machine. Installs the tree as device_run.sh does (a
# reduced instantiation set unless CHIPLET_FA_DTYPES / CHIPLET_FA_HDIMS say otherwise), runs the
# smoke sweep and the benchmark; then for each patch named as an argument (`git diff` output,
# relative to the tree): applies it, reinstalls (the build folder stays, so ninja recompiles only
# the units the patch touches), runs the same, and takes the patch out again; `a.patch+b.patch`
# tries two patches together. Each variant's benchmark has cuDNN in its own process: the variants
# compare by their "/ cuDNN" ratios.
#   AB_BENCH  the benchmarks, separated by ';', each given --out DIR and run from the repository's
#             root (default: bench/fwd.py on issue #12's small shapes, D=64 and D=128 at H=32 N=8K);
#             AB_SMOKE_TIMEOUT the smoke sweep's limit (180 s)
#   AB_TESTS  checks run on each patched variant after its smoke sweep (not on the tree, which the
#             default install's checks cover), separated by ';', run from the tree's root (e.g.
#             "python3 -P -m pytest tests/test_backward.py -q -m gpu -k deterministic"); log tests.log. Each
#             is split on spaces (no quoted arguments). Many tests draw float16, so with AB_TESTS
#             the default dtypes are bf16,fp16
#   AB_PROFILE=1  also Nsight Compute on each variant (device_run.sh's profile stage, ~75 s; its
#             PROFILE_* variables apply), after its checks: reports and the SASS tables in the
#             variant's profile/ folder, its log profile.log
#   bash tools/device/ab_run.sh /tmp/a.patch /tmp/b.patch /tmp/a.patch+/tmp/b.patch   (from the repository's root)
# Results: $OUT/results.tgz, a folder per variant (0-tree, 1-<patch>, ...) with its logs and
# the benchmark's files; the table printed last has each variant's chiplet_fa TFLOP/s and ratio.
#   AB_ROUNDS=N  the benchmarks N times over the variants in turn, once every variant is built
#             (default 1): each variant's installed package is kept ($WORK/<variant>/pkg, put first
#             on PYTHONPATH), round r starts at the variant r places further on, so none always
#             runs first on a card that warms over the call, and the table gives each variant's
#             median over the rounds with the ratio's range: processes of one build moved 3-7%
#             between readings (docs/benchmarking.md, "Deciding a kernel change"), which one reading
#             a variant cannot tell from a change.
# Each variant is also packed as soon as it is built, and again after each round ($OUT/<variant>.tgz,
# replaced by results.tgz at the end): a call cut off at its time limit brings back what it finished.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/shared.sh"
[ -n "${AB_TESTS:-}" ] && refuse_one_dtype ab_run.sh AB_TESTS
OUT=${OUT:-/tmp/chiplet_fa_out}
WORK=$(mktemp -d /tmp/ab_run.XXXXXX)  # the variants' folders; $OUT holds only archives
mkdir -p "$OUT"
default_dtypes=bf16
[ -n "${AB_TESTS:-}" ] && default_dtypes=bf16,fp16
export CHIPLET_FA_DTYPES=${CHIPLET_FA_DTYPES:-$default_dtypes} CHIPLET_FA_HDIMS=${CHIPLET_FA_HDIMS:-64,128} PYTHONUNBUFFERED=1
bench=${AB_BENCH:-python3 bench/fwd.py --shapes 8,16,16,2048,64 4,32,8,4096,128 1,32,32,8192,128 1,32,32,8192,64}
status=0

variant() {
  local dir="$WORK/$1" start=$SECONDS
  mkdir -p "$dir"
  if ! python3 -m pip install -v --no-build-isolation --no-deps . > "$dir/build.log" 2>&1; then
    echo "$1: install failed"; tail -30 "$dir/build.log"; return 1
  fi
  echo "$1: install $((SECONDS - start)) s"
  # A variant that fails or hangs in the smoke sweep is not benchmarked: a hang must not take the call.
  if ! timeout -k 10 "${AB_SMOKE_TIMEOUT:-180}" $SMOKE_SWEEP > "$dir/smoke.log" 2>&1; then
    echo "$1: smoke failed or timed out: $(tail -1 "$dir/smoke.log")"; return 1
  fi
  echo "$1: smoke: $(tail -1 "$dir/smoke.log")"
  local t checks
  IFS=';' read -ra checks <<< "${AB_TESTS:-}"
  [ "$1" = 0-tree ] && checks=()
  for t in "${checks[@]}"; do
    if timeout -k 10 "${AB_TESTS_TIMEOUT:-200}" $t >> "$dir/tests.log" 2>&1; then echo "$1: passed: $t"
    else echo "$1: FAILED: $t: $(tail -1 "$dir/tests.log")"; status=1; fi
  done
  # The installed package (from /tmp: not the source tree's), to benchmark later beside the others.
  local pkg
  pkg=$(cd /tmp && python3 -c 'import chiplet_fa, os; print(os.path.dirname(chiplet_fa.__file__))') &&
    mkdir -p "$dir/pkg" && cp -r "$pkg" "$dir/pkg/" || { echo "$1: cannot keep its package"; return 1; }
  if [ -n "${AB_PROFILE:-}" ]; then
    if OUT="$dir/profile" SKIP_BUILD=1 bash "$here/device_run.sh" profile > "$dir/profile.log" 2>&1; then
      echo "$1: profiled (profile.log, profile/results.tgz)"
    else echo "$1: profile failed: $(tail -1 "$dir/profile.log")"; status=1; fi
  fi
}

# A variant is one patch or several joined by '+' (applied in order, taken out in reverse).
take_out() { local i; for ((i = $# ; i >= 1; i--)); do apply_patch -R "${!i}" || return 1; done; }
put_in() {
  local done_=() q
  for q in "$@"; do apply_patch "$q" || { take_out "${done_[@]}"; return 1; }; done_+=("$q"); done
}

# (archive names keep to letters, digits, '.', '_' and '-', which any file transfer takes: '+' becomes '_')
# A variant's kept package (a build's _C.so) stays behind: the results are its logs and tables.
pack() { tar czf "$OUT/${1//+/_}.tgz" --exclude=pkg -C "$WORK" "$1"; }

# Variant $1's benchmarks into folder $2, on its own package.
benchmarks() {
  local b benches
  IFS=';' read -ra benches <<< "$bench"
  mkdir -p "$2"
  for b in "${benches[@]}"; do
    PYTHONPATH="$WORK/$1/pkg" timeout -k 10 400 $b --out "$2" >> "$2/bench.log" 2>&1 ||
      { echo "$1: $b failed"; tail -5 "$2/bench.log"; status=1; }
  done
}

n=0
built=()
variant 0-tree; tree=$?
[ $tree = 0 ] && built+=(0-tree)
pack 0-tree
if [ $tree = 0 ]; then
  for set in "$@"; do
    n=$((n + 1))
    IFS=+ read -ra parts <<< "$set"
    name="$n-$(for q in "${parts[@]}"; do basename "$q" .patch; done | paste -sd+)"
    if ! put_in "${parts[@]}"; then echo "$name: does not apply to the tree"; status=1; continue; fi
    if variant "$name"; then built+=("$name"); else status=1; fi
    pack "$name"
    take_out "${parts[@]}" || { echo "$name: cannot be taken out again"; status=1; break; }
  done
else
  echo "the tree itself failed: no patch tried"; status=1
fi

rounds=${AB_ROUNDS:-1}
for ((r = 0; r < rounds; r++)); do
  for ((i = 0; i < ${#built[@]}; i++)); do
    v=${built[$(( (i + r) % ${#built[@]} ))]}
    if [ "$rounds" = 1 ]; then benchmarks "$v" "$WORK/$v"; else benchmarks "$v" "$WORK/$v/round$r"; fi
  done
  [ "$rounds" = 1 ] || echo "round $r done"
  for v in "${built[@]}"; do pack "$v"; done
done

python3 "$here/ab_table.py" "$WORK" | tee "$WORK/ab.md"
# One archive holds everything, so a transfer that takes few files brings all of it back.
rm -f "$OUT"/*.tgz && tar czf "$OUT/results.tgz" --exclude=pkg -C "$WORK" . && rm -rf "$WORK"
exit $status
