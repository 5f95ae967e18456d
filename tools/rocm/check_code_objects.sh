#!/usr/bin/env bash
# The AMD GPU code objects a HIP library embeds (one per translation unit and architecture),
# extracted with llvm-objdump --offloading and disassembled: for each architecture named, exactly
# UNITS of them must hold v_mfma (matrix-core) instructions, one per kernel unit.
#   check_code_objects.sh LIBRARY UNITS ARCH...     (LLVM_BIN: the folder of llvm-objdump)
# .ci/hip_build.sh runs it on the ROCm wheel's _C.abi3.so.
set -euo pipefail
lib=$1 units=$2
shift 2
objdump="${LLVM_BIN:+$LLVM_BIN/}llvm-objdump"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$lib" "$tmp/lib.so"
"$objdump" --offloading "$tmp/lib.so" >/dev/null
status=0
for arch in "$@"; do
  count=0 with=0 mfma=0
  for obj in "$tmp"/lib.so.*--"$arch"; do
    [ -e "$obj" ] || continue
    n=$("$objdump" -d "$obj" | grep -c v_mfma || true)
    count=$((count + 1)) mfma=$((mfma + n))
    [ "$n" -eq 0 ] || with=$((with + 1))
  done
  echo "$(basename "$lib") $arch: $count code objects, $with with v_mfma ($mfma instructions)"
  if [ "$with" -ne "$units" ]; then
    echo "check_code_objects: expected $units $arch code objects with v_mfma, one per kernel unit" >&2
    status=1
  fi
done
exit $status
