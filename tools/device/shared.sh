# Sourced by device_run.sh and ab_run.sh (from the repository's root).

# apply_patch [-R] FILE applies (or with -R takes out) a `git diff` patch to the tree in the working
# directory. git apply works outside a repository too (the device copy of the tree has none);
# patch(1) where the image has no git.
apply_patch() {
  if command -v git > /dev/null; then git apply "$@"; else patch -p1 --quiet "${@:1:$#-1}" < "${@: -1}"; fi
}

# The GPU tests skip the head dims a reduced build leaves out, not its dtypes, so a build of one half
# dtype would fail them for no kernel's fault. refuse_one_dtype SCRIPT WHAT: exit 2 before anything
# is installed when CHIPLET_FA_DTYPES lacks one.
refuse_one_dtype() {
  local dtypes=${CHIPLET_FA_DTYPES:-}
  if [ -n "$dtypes" ] && [[ "$dtypes" != *fp16* || "$dtypes" != *bf16* ]]; then
    echo "$1: $2 needs fp16 and bf16 kernels, but CHIPLET_FA_DTYPES=$dtypes builds one only" >&2
    exit 2
  fi
}

# The smoke sweep (tests/test_gpu_smoke.py) on the installed package (-P: not the source tree's), a
# command line to run under timeout; its last line counts the passed, failed and skipped cases.
SMOKE_SWEEP="python3 -P -m pytest tests/test_gpu_smoke.py -q -m smoke"
