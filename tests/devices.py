"""The devices tests run on: CPU always, CUDA/ROCm (marked `gpu`) where one is present."""
import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA or ROCm device")
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, needs_cuda])]
