"""The devices tests run on: CPU always, CUDA/ROCm (marked `gpu`) where one is present, and for
the kernel tests (fwd, bwd) "emulated" (marked `emulated`): CPU tensors in a build with
CHIPLET_FA_EMULATE=cdna3, where float16/bfloat16 calls run the CDNA3 kernels on the emulator.
Those tests draw the GPU's problems for it, at sizes the emulator runs in CI's time."""
import pytest
import torch

import chiplet_fa.emulate

HAS_CUDA = torch.cuda.is_available()
EMULATED = chiplet_fa.emulate.available()
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA or ROCm device")
needs_emulation = pytest.mark.skipif(
    not EMULATED, reason="needs a build with the emulated CDNA3 kernels (CXX=clang++-19 CHIPLET_FA_EMULATE=cdna3)")
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, needs_cuda])]
DEVICES_AND_EMULATOR = DEVICES + [pytest.param("emulated", marks=[pytest.mark.emulated, needs_emulation])]


def torch_device(device: str) -> str:
    """The torch device of a test device: the emulator runs on CPU tensors."""
    return "cpu" if device == "emulated" else device


def device_kernels():
    """(family, {kind: {"head_dims": [...], ...}}) of the kernel family the GPU runs in this build
    (a reduced build, CHIPLET_FA_HDIMS, compiles fewer head dims)."""
    info = chiplet_fa.build_info()
    family = info["kernel_path"].split(" ")[0]
    return family, info["kernels"].get(family, {})


def _built_widest() -> int:
    """The widest head dim the device's kernel family covers forward and backward; 0 without a GPU."""
    if not HAS_CUDA:
        return 0
    kinds = device_kernels()[1]
    return min(max(kinds.get(k, {}).get("head_dims", [0])) for k in ("fwd", "bwd"))


BUILT_WIDEST = _built_widest()


def built_gpu_head_dims(head_dims):
    """The head dims of `head_dims` this build's GPU kernels cover: what GPU tests draw and run,
    so a reduced build's tests report kernel failures, not the head dims it left out."""
    return [d for d in head_dims if d <= BUILT_WIDEST] if HAS_CUDA else list(head_dims)


def skip_unless_built(head_dim):
    if HAS_CUDA and head_dim > BUILT_WIDEST:
        pytest.skip(f"head_dim {head_dim}: no GPU kernel in this build (CHIPLET_FA_HDIMS)")
