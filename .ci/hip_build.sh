#!/usr/bin/env bash
# The HIP build, host and device, without an AMD GPU or a ROCm torch. Debian testing's HIP
# toolchain (hipcc with clang, libamdhip64, rocThrust) goes into a fresh debootstrap'd chroot;
# inside it the one CMakeLists.txt builds, with CHIPLET_FA_TORCH=OFF:
#   - every cdna3 kernel unit for gfx942 (and gfx950: the compiler takes it, and this script
#     requires it) into libchiplet_fa_kernels.so, linked against libamdhip64;
#   - tools/hip_launch_check, which launches each instantiation through the bindings' dispatch and
#     must be answered hipErrorNoDevice (it is run);
#   - the torch-facing bindings (ops/gpu/*.cu) compiled, not linked, against torch 2.14.1's
#     headers hipified by torch's own hipify (tools/rocm/hipify_torch_headers.py).
# Then the code objects embedded in the library are extracted per architecture and each must hold
# v_mfma instructions (tools/rocm/check_code_objects.sh). What this leaves unverified is listed in
# docs/families.md.
#
# Torch headers: CFA_TORCH_PACKAGE (an installed torch package folder), else $CI_VENVS/cuda-build's
# torch (.ci/cuda_wheel.sh installs torch 2.14.1 there), else torch 2.14.1 installed here without
# its dependencies. CFA_HIP_SUITE picks the Debian suite (default testing).
set -euo pipefail
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# --- inside the chroot: /src is the checkout, /torch-hip/include the hipified headers ---
if [ "${1:-}" = inside ]; then
  llvm_bin=$(hipcc --version | sed -n 's/^InstalledDir: //p')
  echo "toolchain: $(hipcc --version | head -1); clang in $llvm_bin"
  # Warnings are errors, except #warning: Debian's rocPRIM 6.4 (under torch's complex.h, through
  # rocThrust) warns "unknown build target" for gfx950, which it predates.
  env -u PYTORCH_ROCM_ARCH cmake -S /src -B /build -G Ninja -DCHIPLET_FA_BACKEND=hip -DCHIPLET_FA_TORCH=OFF \
    -DCMAKE_CXX_COMPILER="$llvm_bin/clang++" -DCMAKE_HIP_COMPILER="$llvm_bin/clang++" \
    -DCMAKE_HIP_FLAGS="-Werror -Wno-error=#warnings" -DCHIPLET_FA_TORCH_INCLUDE=/torch-hip/include >/build.log \
    || { cat /build.log; echo "hip_build: CMake configure failed"; exit 1; }
  archs=$(sed -n 's/^#define CHIPLET_FA_GPU_ARCHS "\(.*\)"/\1/p' /build/generated/build_config.h)  # CMake's default
  [ "$archs" = "gfx942;gfx950" ] || { echo "hip_build: CMake picked '$archs', expected gfx942;gfx950"; exit 1; }
  start=$SECONDS
  cmake --build /build -j "$(nproc)" >>/build.log 2>&1 || { tail -c 20000 /build.log; echo "hip_build: build failed"; exit 1; }
  units=$(find /build/CMakeFiles/chiplet_fa_kernels.dir -name '*.o' | wc -l)
  bindings=$(find /build/CMakeFiles/chiplet_fa_bindings.dir -name '*.o' | wc -l)
  echo "built for $archs in $((SECONDS - start))s: libchiplet_fa_kernels.so ($units kernel units), hip_launch_check," \
       "$bindings binding objects compiled against the hipified torch headers"
  echo "libchiplet_fa_kernels.so needs: $("$llvm_bin/llvm-readelf" -d /build/libchiplet_fa_kernels.so | grep -o 'libamdhip64[^]]*')"
  /build/hip_launch_check
  # One gfx942 and one gfx950 code object per kernel unit, each with matrix-core instructions.
  LLVM_BIN="$llvm_bin" bash /src/tools/rocm/check_code_objects.sh /build/libchiplet_fa_kernels.so "$units" ${archs//;/ }
  exit 0
fi

# --- on the host, in a private mount namespace with the work folder on a tmpfs: the chroot, its
# /proc and every file go when the script ends, however it ends (and tmpfs spares the disk's slow
# metadata: removing the chroot from disk took 95 s) ---
if [ "${CFA_HIP_NAMESPACE:-}" != 1 ]; then
  exec env CFA_HIP_NAMESPACE=1 unshare --mount --propagation private -- bash "${BASH_SOURCE[0]}" "$@"
fi
retry() {  # a network step, three tries
  local i
  for i in 1 2 3; do
    "$@" && return 0
    echo "hip_build: attempt $i of 3 failed: $*" >&2
    sleep $((i * 15))
  done
  return 1
}
phase() { printf -- '--- %s (%ss)\n' "$1" "$SECONDS"; }

work=$(mktemp -d /tmp/cfa-hip.XXXXXX)
trap 'umount -R "$work" 2>/dev/null; rmdir "$work"' EXIT
mount -t tmpfs -o size=12g,mode=0755 cfa-hip "$work"
root="$work/root"
in_root() { chroot "$root" "$@"; }
suite="${CFA_HIP_SUITE:-testing}"

phase "Debian $suite chroot"
if ! command -v debootstrap >/dev/null; then
  retry apt-get update -qq && retry apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi
bootstrap() { rm -rf "$root" && debootstrap --variant=minbase "$suite" "$root" http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1; }
retry bootstrap || { tail -20 "$work/debootstrap.log"; echo "hip_build: debootstrap of Debian $suite failed"; exit 1; }
cp /etc/resolv.conf "$root/etc/resolv.conf"
mount -t proc proc "$root/proc"
apt_root() {
  in_root env DEBIAN_FRONTEND=noninteractive apt-get -qq -o Acquire::Check-Valid-Until=false -o Acquire::Retries=3 \
    -o Dpkg::Use-Pty=0 "$@"
}
phase "HIP toolchain from Debian $suite"
retry apt_root update
retry apt_root install -y --no-install-recommends hipcc libamdhip64-dev librocthrust-dev cmake ninja-build >/dev/null \
  || { echo "hip_build: Debian $suite's HIP packages did not install (hipcc, libamdhip64-dev, librocthrust-dev)"; exit 1; }
llvm=$(in_root hipcc --version | sed -n 's|^InstalledDir: /usr/lib/\(llvm-[0-9]*\)/bin|\1|p')
[ -n "$llvm" ] || { echo "hip_build: hipcc names no /usr/lib/llvm-N clang"; exit 1; }
retry apt_root install -y --no-install-recommends "$llvm" >/dev/null  # llvm-objdump, for the code objects

phase "torch headers, hipified"
torch_pkg="${CFA_TORCH_PACKAGE:-}"
if [ -z "$torch_pkg" ] && [ -n "${CI_VENVS:-}" ]; then
  torch_pkg=$(ls -d "$CI_VENVS"/cuda-build/lib/python3*/site-packages/torch 2>/dev/null | head -1 || true)
fi
if [ -z "$torch_pkg" ]; then
  python3 -m venv "$work/torch"
  retry "$work/torch/bin/pip" install -q --no-deps torch==2.14.1
  torch_pkg=$(ls -d "$work"/torch/lib/python3*/site-packages/torch)
fi
python3 "$src/tools/rocm/hipify_torch_headers.py" "$torch_pkg" "$root/torch-hip"

phase "build in the chroot"
mkdir "$root/src"
(cd "$src" && git ls-files -co --exclude-standard -z | tar -c --null -T - -f -) | tar -x -C "$root/src"
in_root bash /src/.ci/hip_build.sh inside
phase "HIP build done"
