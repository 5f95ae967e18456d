#!/usr/bin/env bash
# The ROCm wheel, built without an AMD GPU or a ROCm torch. Debian testing's HIP toolchain (hipcc
# with clang, libamdhip64, rocThrust) and Python go into a fresh debootstrap'd chroot; inside it
# `pip wheel` builds chiplet_fa for gfx942 and gfx950 (warnings as errors in HIP code) against
# torch 2.14.1's stable headers and libtorch_cpu.so, as a ROCm torch would load it: _C.abi3.so
# needs only torch's C shim, libamdhip64 and the C/C++ runtimes. Then:
#   - tools/hip_launch_check, added to the same CMake build (the kernel objects are not compiled
#     again), launches each instantiation through the bindings' dispatch and must be answered
#     hipErrorNoDevice;
#   - the code objects in the wheel's _C.abi3.so, extracted per architecture: one per kernel unit
#     and architecture must hold v_mfma instructions (tools/rocm/check_code_objects.sh);
#   - on the host, tools/check_abi.py: the libraries and symbols _C.abi3.so imports, listed, and the
#     wheel's files. The wheel is copied to $CI_VENVS/dist-rocm (CFA_HIP_DIST overrides).
# The wheel has never been imported on an AMD GPU; what is unverified is listed in docs/families.md.
#
# Torch: CFA_TORCH_PACKAGE (an installed torch package folder), else $CI_VENVS/cuda-build's torch
# (.ci/cuda_wheel.sh installs torch 2.14.1 there), else torch 2.14.1 installed here without its
# dependencies; only its include/ and lib/libtorch_cpu.so are mounted into the chroot, read-only.
# CFA_HIP_SUITE picks the Debian suite (default testing). Needs root (debootstrap, mounts).
set -euo pipefail
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
archs="gfx942;gfx950"

# --- inside the chroot: /src is the checkout, /torch the torch package's headers and libtorch_cpu ---
if [ "${1:-}" = inside ]; then
  llvm_bin=$(hipcc --version | sed -n 's/^InstalledDir: //p')
  echo "toolchain: $(hipcc --version | head -1); clang in $llvm_bin; $(python3 --version)"
  export CXX="$llvm_bin/clang++" HIPCXX="$llvm_bin/clang++"
  # CMake's own default targets, for a build given none: gfx950 too, as the compiler takes it.
  env -u PYTORCH_ROCM_ARCH cmake -S /src -B /probe -G Ninja -DCHIPLET_FA_BACKEND=hip -DCHIPLET_FA_TORCH_DIR=/torch \
    -DCHIPLET_FA_CXX_RUNTIME= -DPython_EXECUTABLE="$(command -v python3)" \
    >/probe.log 2>&1 || { cat /probe.log; echo "hip_build: CMake configure failed"; exit 1; }
  picked=$(sed -n 's/^#define CHIPLET_FA_GPU_ARCHS "\(.*\)"/\1/p' /probe/generated/build_config.h)
  [ "$picked" = "$archs" ] || { echo "hip_build: CMake's default targets are '$picked', expected $archs"; exit 1; }

  # Warnings are errors in HIP code, except #warning: Debian's rocPRIM 6.4 (under torch's complex.h,
  # through rocThrust) warns "unknown build target" for gfx950, which it predates.
  start=$SECONDS
  HIPFLAGS="-Werror -Wno-error=#warnings" CHIPLET_FA_BUILD=hip PYTORCH_ROCM_ARCH="$archs" CHIPLET_FA_TORCH_DIR=/torch \
    CHIPLET_FA_CXX_RUNTIME= CHIPLET_FA_BUILD_DIR=/build python3 -m pip wheel --no-build-isolation --no-deps /src -w /dist >/build.log 2>&1 \
    || { tail -c 20000 /build.log; echo "hip_build: pip wheel failed"; exit 1; }
  wheel=$(ls /dist/chiplet_fa-*.whl)
  units=$(find /build/CMakeFiles/cfa_cdna3_kernels.dir -name '*.o' | wc -l)
  echo "built $(basename "$wheel") in $((SECONDS - start))s ($units kernel units)"
  [[ $(basename "$wheel") == chiplet_fa-*+rocm.gfx942.gfx950-cp310-abi3-linux_$(uname -m).whl ]] \
    || { echo "hip_build: the wheel's name does not say rocm.gfx942.gfx950 and cp310-abi3"; exit 1; }

  # The launch check from the wheel build's kernel objects: its own source is the one compiled.
  cmake -S /src -B /build -DCHIPLET_FA_HIP_LAUNCH_CHECK=ON >>/build.log 2>&1
  cmake --build /build --target hip_launch_check >/launch_check.log 2>&1 \
    || { cat /launch_check.log; echo "hip_build: hip_launch_check did not build"; exit 1; }
  compiled=$(grep -c 'Building HIP object' /launch_check.log || true)
  [ "$compiled" -eq 1 ] \
    || { cat /launch_check.log; echo "hip_build: $compiled sources compiled for hip_launch_check, expected its own alone"; exit 1; }
  /build/hip_launch_check

  python3 -m zipfile -e "$wheel" /wheel
  so=/wheel/chiplet_fa/_C.abi3.so
  echo "_C.abi3.so needs: $("$llvm_bin/llvm-readelf" -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | paste -sd ' ')"
  LLVM_BIN="$llvm_bin" bash /src/tools/rocm/check_code_objects.sh "$so" "$units" ${archs//;/ }
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
retry apt_root install -y --no-install-recommends hipcc libamdhip64-dev librocthrust-dev cmake ninja-build \
  python3 python3-dev python3-pip python3-setuptools python3-wheel >/dev/null \
  || { echo "hip_build: Debian $suite's HIP and Python packages did not install"; exit 1; }
llvm=$(in_root hipcc --version | sed -n 's|^InstalledDir: /usr/lib/\(llvm-[0-9]*\)/bin|\1|p')
[ -n "$llvm" ] || { echo "hip_build: hipcc names no /usr/lib/llvm-N clang"; exit 1; }
retry apt_root install -y --no-install-recommends "$llvm" >/dev/null  # llvm-objdump, for the code objects

phase "torch 2.14.1's headers and libtorch_cpu.so"
torch_pkg="${CFA_TORCH_PACKAGE:-}"
if [ -z "$torch_pkg" ] && [ -n "${CI_VENVS:-}" ]; then
  torch_pkg=$(ls -d "$CI_VENVS"/cuda-build/lib/python3*/site-packages/torch 2>/dev/null | head -1 || true)
fi
if [ -z "$torch_pkg" ]; then
  python3 -m venv "$work/torch"
  retry "$work/torch/bin/pip" install -q --no-deps torch==2.14.1
  torch_pkg=$(ls -d "$work"/torch/lib/python3*/site-packages/torch)
fi
echo "torch $(sed -n "s/^__version__ = '\(.*\)'/\1/p" "$torch_pkg/version.py") from $torch_pkg"
bind_ro() { mount --bind "$1" "$2" && mount -o remount,bind,ro "$2"; }
mkdir -p "$root/torch/include" "$root/torch/lib"
touch "$root/torch/lib/libtorch_cpu.so"
bind_ro "$torch_pkg/include" "$root/torch/include"
bind_ro "$torch_pkg/lib/libtorch_cpu.so" "$root/torch/lib/libtorch_cpu.so"

phase "build in the chroot"
mkdir "$root/src"
(cd "$src" && git ls-files -co --exclude-standard -z | tar -c --null -T - -f -) | tar -x -C "$root/src"
in_root bash /src/.ci/hip_build.sh inside

phase "the wheel's imports and files"
wheel=$(ls "$root"/dist/chiplet_fa-*.whl)
python3 "$src/tools/check_abi.py" "$wheel" --list
python3 -m zipfile -l "$wheel"
dist="${CFA_HIP_DIST:-${CI_VENVS:-$(mktemp -d /tmp/cfa-rocm.XXXXXX)}/dist-rocm}"
mkdir -p "$dist"
cp "$wheel" "$dist/"
echo "wheel: $dist/$(basename "$wheel")"
phase "HIP build done"
