"""What the installed build covers: whether the kernel family this device runs has a kernel for a
call. A reduced build (CHIPLET_FA_DTYPES / CHIPLET_FA_HDIMS) leaves kernels out; the smoke sweep
(tests/test_gpu_smoke.py) and the sanitizer cases (sanitize_cases.py) skip what it lacks rather
than fail on it."""
import functools

import torch

import chiplet_fa

DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16"}


@functools.lru_cache
def family_kernels():
    """{kind: {dtypes, head_dims}} of the family this device runs."""
    return chiplet_fa.build_info()["kernels"].get(chiplet_fa.kernel_path().split()[0], {})


def built(kind, dtype, head_dim):
    """Whether the family this device runs has a `kind` ("fwd", "bwd") kernel covering (dtype, head_dim)."""
    have = family_kernels().get(kind)
    if kind == "bwd" and have and head_dim > max(have["head_dims"]) and "sm90" in chiplet_fa.kernel_path():
        # sm90 hands wider backward head dims to mma_sync (ops/kernel_binding.h: bwd_family).
        have = chiplet_fa.build_info()["kernels"].get("mma_sync", {}).get("bwd")
    return bool(have) and DTYPE_NAMES[dtype] in have["dtypes"] and head_dim <= max(have["head_dims"])
