"""Forward correctness against the fp64 reference, on CPU and (marked gpu) on CUDA/ROCm."""
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import chiplet_fa
from devices import DEVICES_AND_EMULATOR as DEVICES
from devices import built_gpu_head_dims, skip_unless_built, torch_device
from reference import assert_close_to_ref, attention_ref, fully_masked_rows

MAPPINGS = ("auto",) + chiplet_fa.MAPPINGS
# Floors of flash-attention's rule, per dtype: (out, lse). lse is float32, float64 for float64 inputs.
FLOORS = {torch.float16: (1e-3, 1e-3), torch.bfloat16: (8e-3, 1e-3),
          torch.float32: (1e-5, 1e-5), torch.float64: (1e-10, 1e-10)}
CPU_DTYPES = tuple(FLOORS)
GPU_DTYPES = (torch.float16, torch.bfloat16)
# GPU kernels take head dims in steps of 8; others are padded by the binding.
GPU_HEAD_DIMS = tuple(range(8, 257, 8)) + (20, 100)
KERNEL_HEAD_DIMS = {"cuda": tuple(built_gpu_head_dims(GPU_HEAD_DIMS)), "emulated": GPU_HEAD_DIMS}
# Largest lengths and KV heads drawn: the emulator runs a GPU-shaped problem ~1000x slower.
MAX_LEN = {"cpu": 260, "cuda": 400, "emulated": 200}
MAX_KV_HEADS = {"cpu": 3, "cuda": 4, "emulated": 2}
# Tiles: 64 rows on CPU, 128x64 on GPU; lengths straddle both.
EDGE_LENGTHS = (1, 2, 63, 64, 65, 127, 128, 129, 191, 257)


@st.composite
def problems(draw, device):
    gpu = device != "cpu"
    max_len = MAX_LEN[device]
    length = st.one_of(st.sampled_from([n for n in EDGE_LENGTHS if n <= max_len]),
                       st.integers(1, max_len))
    num_kv_heads = draw(st.integers(1, MAX_KV_HEADS[device]))
    return dict(
        batch=draw(st.integers(1, 2)),
        seqlen_q=draw(length),
        seqlen_k=draw(length),
        num_kv_heads=num_kv_heads,
        num_q_heads=num_kv_heads * draw(st.integers(1, 4 if device == "cuda" else 3)),
        head_dim=draw(st.sampled_from(KERNEL_HEAD_DIMS[device]) if gpu else
                      st.one_of(st.sampled_from([1, 2, 3, 64, 255, 256]), st.integers(1, 256))),
        causal=draw(st.booleans()),
        dtype=draw(st.sampled_from(GPU_DTYPES if gpu else CPU_DTYPES)),
        softmax_scale=draw(st.one_of(st.none(), st.floats(0.05, 2.0))),
    )


def random_qkv(p, device, seed=0):
    gen = torch.Generator().manual_seed(seed)

    def rand(n, h):
        shape = (p["batch"], n, h, p["head_dim"])
        return torch.randn(shape, generator=gen, dtype=torch.float64).to(torch_device(device), p["dtype"])

    return (rand(p["seqlen_q"], p["num_q_heads"]), rand(p["seqlen_k"], p["num_kv_heads"]),
            rand(p["seqlen_k"], p["num_kv_heads"]))


def check_against_reference(p, device, mapping="auto", num_xcds=-1):
    q, k, v = random_qkv(p, device)
    out, lse = torch.ops.chiplet_fa.fwd(q, k, v, p["softmax_scale"], p["causal"], mapping, num_xcds)
    assert out.dtype == q.dtype and out.shape == q.shape and out.device == q.device
    lse_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    assert lse.dtype == lse_dtype and lse.shape == (p["batch"], p["num_q_heads"], p["seqlen_q"])
    out_ref, lse_ref = attention_ref(q, k, v, p["causal"], p["softmax_scale"])
    out_pt, lse_pt = attention_ref(q, k, v, p["causal"], p["softmax_scale"], dtype=q.dtype)
    out_floor, lse_floor = FLOORS[q.dtype]
    assert_close_to_ref(out, out_ref, out_pt, out_floor, "out")
    assert_close_to_ref(lse, lse_ref, lse_pt.to(lse_dtype), lse_floor, "lse")
    masked = fully_masked_rows(p["seqlen_q"], p["seqlen_k"], p["causal"]).to(torch_device(device))
    assert (out[:, masked] == 0).all(), "fully masked rows must give exactly 0"
    assert (lse[:, :, masked] == float("-inf")).all(), "fully masked rows must give lse -inf"
    return out, lse


@pytest.mark.parametrize("device", DEVICES)
@given(data=st.data())
def test_matches_fp64_reference(device, data):
    check_against_reference(data.draw(problems(device)), device)


@pytest.mark.parametrize("device", DEVICES)
@given(data=st.data())
def test_every_mapping_and_domain_count_gives_identical_results(device, data):
    # Tiles are computed independently, so the order they run in cannot change a single bit. (Past a
    # round of sm90's workers the tiles of the last one may be split over keys, and which tiles
    # come last depends on the mapping: kernels/tail_split.h. The problems here fit one round.)
    p = data.draw(problems(device))
    num_xcds = data.draw(st.sampled_from([1, 2, 3, 8]))
    q, k, v = random_qkv(p, device)
    first = torch.ops.chiplet_fa.fwd(q, k, v, p["softmax_scale"], p["causal"], "head_first", 1)
    for mapping in MAPPINGS:
        got = torch.ops.chiplet_fa.fwd(q, k, v, p["softmax_scale"], p["causal"], mapping, num_xcds)
        assert torch.equal(got[0], first[0]) and torch.equal(got[1], first[1]), mapping


@pytest.mark.parametrize("device", [d for d in DEVICES if d != "cpu"])
@pytest.mark.parametrize("dtype", GPU_DTYPES)
@pytest.mark.parametrize("head_dim", (32, 64, 96, 128, 192, 256, 8, 20, 72, 100, 136))
@pytest.mark.parametrize("causal", [False, True])
def test_every_kernel_head_dim_matches_reference(device, dtype, head_dim, causal):
    # Each instantiation (fp16/bf16 x head dims 32..256 x causal) once, and head dims the binding
    # pads or runs in a wider instantiation; N_q > N_k, neither a multiple of a tile, GQA.
    skip_unless_built(head_dim)
    p = dict(batch=1, seqlen_q=130, seqlen_k=97, num_q_heads=4, num_kv_heads=2, head_dim=head_dim,
             causal=causal, dtype=dtype, softmax_scale=None)
    check_against_reference(p, device, "swizzled_head_first", num_xcds=3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mapping", MAPPINGS)
def test_each_mapping_matches_reference_on_a_many_tile_gqa_problem(device, mapping):
    dtype = torch.bfloat16 if device != "cpu" else torch.float32
    p = dict(batch=2, seqlen_q=300, seqlen_k=200, num_q_heads=6, num_kv_heads=2, head_dim=64,
             causal=True, dtype=dtype, softmax_scale=None)
    check_against_reference(p, device, mapping, num_xcds=4)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seqlen_q, seqlen_k", [(100, 30), (1, 0), (70, 0), (129, 1)])
def test_rows_that_see_no_key_give_zero_and_minus_inf(device, seqlen_q, seqlen_k):
    dtype = torch.float16 if device != "cpu" else torch.float32
    p = dict(batch=2, seqlen_q=seqlen_q, seqlen_k=seqlen_k, num_q_heads=4, num_kv_heads=2,
             head_dim=32, causal=True, dtype=dtype, softmax_scale=None)
    out, lse = check_against_reference(p, device)
    visible = ~fully_masked_rows(seqlen_q, seqlen_k, True).to(torch_device(device))
    assert torch.isfinite(lse[:, :, visible]).all() and torch.isfinite(out).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape_q, shape_k", [
    ((0, 5, 4, 32), (0, 7, 2, 32)),  # empty batch
    ((2, 0, 4, 32), (2, 7, 2, 32)),  # no queries
    ((2, 0, 4, 32), (2, 0, 2, 32)),  # no queries, no keys
])
def test_empty_problems_return_empty_results(device, shape_q, shape_k):
    dtype = torch.float16 if device != "cpu" else torch.float32
    q = torch.randn(shape_q, device=torch_device(device), dtype=dtype)
    k = torch.randn(shape_k, device=torch_device(device), dtype=dtype)
    out, lse = torch.ops.chiplet_fa.fwd(q, k, k.clone(), causal=True)
    assert out.shape == shape_q and out.dtype == dtype and out.device == q.device
    assert lse.shape == (shape_q[0], shape_q[2], shape_q[1]) and lse.dtype == torch.float32


@pytest.mark.parametrize("device", DEVICES)
def test_strided_inputs_are_read_through_their_strides(device):
    # q, k, v as views of one packed (B, N, 3, H, D) tensor, as a fused QKV projection gives.
    dtype = torch.float16 if device != "cpu" else torch.float64
    qkv = torch.randn(2, 150, 3, 4, 40, device=torch_device(device), dtype=dtype)
    q, k, v = qkv.unbind(2)
    assert not q.is_contiguous()
    out, lse = torch.ops.chiplet_fa.fwd(q, k, v, causal=True)
    out_c, lse_c = torch.ops.chiplet_fa.fwd(q.contiguous(), k.contiguous(), v.contiguous(), causal=True)
    assert torch.equal(out, out_c) and torch.equal(lse, lse_c)


@pytest.mark.parametrize("device", DEVICES)
def test_broadcast_inputs_give_the_results_of_their_copies(device):
    # k and v broadcast over heads and batch (stride 0), as an expand() of MQA's one KV head gives.
    dtype = torch.bfloat16 if device != "cpu" else torch.float64
    q = torch.randn(3, 130, 4, 64, device=torch_device(device), dtype=dtype)
    k, v = (torch.randn(1, 150, 1, 64, device=torch_device(device), dtype=dtype).expand(3, 150, 2, 64)
            for _ in range(2))
    assert k.stride(0) == 0 and k.stride(2) == 0
    got = torch.ops.chiplet_fa.fwd(q, k, v, causal=True)
    want = torch.ops.chiplet_fa.fwd(q, k.contiguous(), v.contiguous(), causal=True)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.parametrize("device", DEVICES)
def test_attention_returns_the_op_output(device):
    dtype = torch.float16 if device != "cpu" else torch.float32
    q, k, v = (torch.randn(1, 70, 4, 16, device=torch_device(device), dtype=dtype) for _ in range(3))
    out = chiplet_fa.attention(q, k, v, causal=True, softmax_scale=0.3, mapping="block_first")
    assert torch.equal(out, torch.ops.chiplet_fa.fwd(q, k, v, 0.3, True, "block_first")[0])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seqlen_q, seqlen_k", [(50, 50), (30, 90), (90, 30), (1, 64)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_sdpa_is_a_drop_in_for_torch(device, seqlen_q, seqlen_k, is_causal):
    dtype = torch.float64 if device == "cpu" else torch.float16
    gen = torch.Generator().manual_seed(1)
    query, key, value = (torch.randn(2, h, n, 24, generator=gen, dtype=torch.float64).to(torch_device(device), dtype)
                         for h, n in ((6, seqlen_q), (2, seqlen_k), (2, seqlen_k)))
    got = chiplet_fa.scaled_dot_product_attention(query, key, value, is_causal=is_causal,
                                                  scale=0.4, enable_gqa=True)
    want, same_dtype = (torch.nn.functional.scaled_dot_product_attention(
        query.to(t), key.to(t), value.to(t), is_causal=is_causal, scale=0.4, enable_gqa=True)
        for t in (torch.float64, dtype))
    assert got.shape == query.shape and got.dtype == dtype
    assert_close_to_ref(got, want, same_dtype, FLOORS[dtype][0])
