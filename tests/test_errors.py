"""Every bad input gets a ValueError naming the argument, from the C++ front end (cpu, cuda)
and from the fake kernel (meta device, and torch.compile's tracing)."""
import subprocess
import sys

import pytest
import torch

import chiplet_fa
from devices import needs_cuda

GPU = [pytest.mark.gpu, needs_cuda]
DEVICES = ["cpu", "meta", pytest.param("cuda", marks=GPU)]


def qkv(device, q_shape=(2, 8, 4, 16), k_shape=None, dtype=torch.float32):
    k_shape = k_shape or q_shape
    return (torch.randn(q_shape, dtype=dtype, device=device),
            torch.randn(k_shape, dtype=dtype, device=device),
            torch.randn(k_shape, dtype=dtype, device=device))


def last_dim_strided(t):
    return t.transpose(-1, -2).contiguous().transpose(-1, -2)


BAD_INPUTS = {
    "q rank": (lambda q, k, v: (q[0], k, v), {}, "q must be 4-D"),
    "k rank": (lambda q, k, v: (q, k.unsqueeze(0), v), {}, "k must be 4-D"),
    "v rank": (lambda q, k, v: (q, k, v[0]), {}, "v must be 4-D"),
    "k dtype": (lambda q, k, v: (q, k.double(), v), {}, "k has dtype"),
    "v dtype": (lambda q, k, v: (q, k, v.bfloat16()), {}, "v has dtype"),
    "int dtype": (lambda q, k, v: (q.int(), k.int(), v.int()), {}, "q must be float16, bfloat16"),
    "head ratio": (lambda q, k, v: (q, k[:, :, :3], v[:, :, :3]), {}, r"num_heads of q \(4\) must be"),
    "k head dim": (lambda q, k, v: (q, k[..., :8], v), {}, "head dims differ"),
    "v head dim": (lambda q, k, v: (q, k, v[..., :8]), {}, "head dims differ"),
    "head dim 0": (lambda q, k, v: (q[..., :0], k[..., :0], v[..., :0]), {}, "head_dim must be in 1..256"),
    "head dim 257": (lambda q, k, v: tuple(t.new_zeros(*t.shape[:3], 257) for t in (q, k, v)), {},
                     "head_dim must be in 1..256"),
    "q last dim": (lambda q, k, v: (last_dim_strided(q), k, v), {}, "q must have a contiguous last"),
    "k last dim": (lambda q, k, v: (q, last_dim_strided(k), v), {}, "k must have a contiguous last"),
    "v last dim": (lambda q, k, v: (q, k, last_dim_strided(v)), {}, "v must have a contiguous last"),
    "k batch": (lambda q, k, v: (q, k[:1], v), {}, "k and v must have batch"),
    "v seqlen": (lambda q, k, v: (q, k, v[:, :3]), {}, "v must have shape"),
    "mapping": (lambda q, k, v: (q, k, v), {"mapping": "diagonal"}, "mapping must be one of"),
    "num_xcds 0": (lambda q, k, v: (q, k, v), {"num_xcds": 0}, "num_xcds must be"),
    "num_xcds -2": (lambda q, k, v: (q, k, v), {"num_xcds": -2}, "num_xcds must be"),
    "scale nan": (lambda q, k, v: (q, k, v), {"softmax_scale": float("nan")}, "softmax_scale must be finite"),
    "scale inf": (lambda q, k, v: (q, k, v), {"softmax_scale": float("inf")}, "softmax_scale must be finite"),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input_raises_value_error_naming_it(device, case):
    make, kwargs, match = BAD_INPUTS[case]
    dtype = torch.float16 if device == "cuda" else torch.float32
    args = make(*qkv(device, dtype=dtype))
    with pytest.raises(ValueError, match=match):
        torch.ops.chiplet_fa.fwd(*args, **kwargs)


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (2, 3, 2, 1), (0, 3, 2, 8), (2, 0, 2, 8)])
def test_last_dimension_without_a_stride_to_check_is_accepted(device, shape):
    # Broadcast (every stride 0): a last dimension of size 1 or an empty tensor is contiguous to
    # torch, so .contiguous() would not change it and the op must take it as it is.
    q, k, v = (torch.randn((), device=device).expand(shape) for _ in range(3))
    out, _ = torch.ops.chiplet_fa.fwd(q, k, v)
    want, _ = torch.ops.chiplet_fa.fwd(*(t.clone(memory_format=torch.contiguous_format) for t in (q, k, v)))
    assert out.shape == shape
    if device == "cpu":
        torch.testing.assert_close(out, want)


@pytest.mark.parametrize("base, other", [
    ("cpu", "meta"),
    pytest.param("cuda", "meta", marks=GPU),
    pytest.param("cpu", "cuda", marks=GPU),
    pytest.param("cuda", "cpu", marks=GPU),
])
@pytest.mark.parametrize("position", [1, 2])
def test_device_mismatch_names_the_tensor(base, other, position):
    # The higher-priority device's kernel runs (meta: the fake kernel; cuda: the CUDA kernel),
    # and it must refuse the mix rather than return garbage.
    args = list(qkv(base))
    args[position] = args[position].to(other)
    name = "kv"[position - 1]
    with pytest.raises(ValueError, match=f"{name} is on {other}"):
        torch.ops.chiplet_fa.fwd(*args)


def test_meta_device_gives_result_shapes_without_computing():
    q, k, v = qkv("meta", (3, 10, 6, 40), (3, 7, 2, 40))
    out, lse = torch.ops.chiplet_fa.fwd(q, k, v)
    assert out.device.type == "meta" and out.shape == (3, 10, 6, 40) and out.dtype == q.dtype
    assert lse.shape == (3, 6, 10) and lse.dtype == torch.float32


@pytest.mark.parametrize("kwargs, match", [
    ({"attn_mask": torch.ones(1, 1, 8, 8, dtype=torch.bool)}, "attn_mask is not supported"),
    ({"dropout_p": 0.1}, "dropout_p must be 0.0"),
])
def test_sdpa_refuses_what_it_does_not_support(kwargs, match):
    q = torch.randn(1, 4, 8, 16)
    with pytest.raises(ValueError, match=match):
        chiplet_fa.scaled_dot_product_attention(q, q, q, **kwargs)


def test_sdpa_needs_enable_gqa_for_fewer_kv_heads():
    q, kv = torch.randn(1, 4, 8, 16), torch.randn(1, 2, 8, 16)
    with pytest.raises(ValueError, match="enable_gqa=True"):
        chiplet_fa.scaled_dot_product_attention(q, kv, kv)


def test_sdpa_names_a_tensor_of_wrong_rank():
    q = torch.randn(1, 4, 8, 16)
    with pytest.raises(ValueError, match="key must be 4-D"):
        chiplet_fa.scaled_dot_product_attention(q, q[0], q)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=GPU)])
def test_bad_input_in_a_fresh_process_raises_value_error(device, tmp_path):
    # The first formatted error message of a process is where an extension that carries its own
    # static copy of libstdc++ crashed (a segmentation fault instead of the error); a fresh
    # process makes this call that first message. Run outside the source tree, so the installed
    # package is imported.
    code = f"""
import torch, chiplet_fa
q = torch.randn(1, 8, 2, 7, device="{device}", dtype=torch.float16)
k = torch.randn(1, 8, 2, 128, device="{device}", dtype=torch.float16)
try:
    torch.ops.chiplet_fa.fwd(q, k, k)
except ValueError as err:
    print("ValueError:", err)
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-2000:]}"
    assert "ValueError: chiplet_fa.fwd: head dims differ: q has 7, k has 128" in done.stdout
