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
