# Sourced by device_run.sh and ab_run.sh. The GPU tests skip the head dims a reduced build leaves
# out, not its dtypes, so a build of one half dtype would fail them for no kernel's fault.
# refuse_one_dtype SCRIPT WHAT: exit 2 before anything is installed when CHIPLET_FA_DTYPES lacks one.
refuse_one_dtype() {
  local dtypes=${CHIPLET_FA_DTYPES:-}
  if [ -n "$dtypes" ] && [[ "$dtypes" != *fp16* || "$dtypes" != *bf16* ]]; then
    echo "$1: $2 needs fp16 and bf16 kernels, but CHIPLET_FA_DTYPES=$dtypes builds one only" >&2
    exit 2
  fi
}
