"""Backward of chiplet_fa: gradients against an fp64 reference (flash-attention's 2x rule),
gradcheck, opcheck, deterministic mode, torch.compile training, and argument errors."""
import contextlib
import itertools

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import chiplet_fa
from _bwd_reference import attention_grads_ref, attention_ref
from devices import DEVICES_AND_EMULATOR as DEVICES
from devices import built_gpu_head_dims, needs_cuda, skip_unless_built
from devices import torch_device
MAPPINGS = ["block_first", "head_first", "swizzled_block_first", "swizzled_head_first"]
# Error floor per dtype, relative to the largest reference gradient: covers cases where the
# input-dtype computation happens to be nearly exact.
FLOOR = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 1e-5}
# Head dims the property tests draw per kernel device, up to 256 (above 128 on sm90 with 64 keys a
# workgroup, elsewhere in column slices; on cdna3 with the smaller tiles 64 KB of LDS holds).
GPU_HEAD_DIMS = {"cuda": built_gpu_head_dims([8, 16, 24, 40, 64, 72, 128, 152, 192, 256]),
                 "emulated": [8, 16, 24, 40, 64, 72, 128, 152, 192, 256]}


@contextlib.contextmanager
def deterministic_algorithms(enabled):
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(enabled)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)


@contextlib.contextmanager
def num_threads(n):
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def make_inputs(batch, n_q, n_k, h_q, h_kv, d, dtype, device, seed=0, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    shapes = [(batch, n_q, h_q, d), (batch, n_k, h_kv, d), (batch, n_k, h_kv, d), (batch, n_q, h_q, d)]
    q, k, v, dout = (torch.randn(s, generator=g, dtype=torch.float64).to(device=torch_device(device), dtype=dtype)
                     for s in shapes)
    for t in (q, k, v):
        t.requires_grad_(requires_grad)
    return q, k, v, dout


def chiplet_grads(q, k, v, dout, causal, mapping="auto", num_xcds=-1, deterministic=False):
    out, lse = torch.ops.chiplet_fa.fwd(q, k, v, None, causal, mapping, num_xcds)
    return torch.ops.chiplet_fa.bwd(dout, q, k, v, out, lse, None, causal, mapping, num_xcds,
                                    deterministic)


def assert_two_x_rule(got, q, k, v, dout, causal):
    """Each gradient's max error vs fp64 is at most 2x that of torch in the input dtype + floor."""
    ref = attention_grads_ref(q, k, v, dout, causal, dtype=torch.float64)
    same_dtype = attention_grads_ref(q, k, v, dout, causal)
    for name, g, r, t in zip(("dq", "dk", "dv"), got, ref, same_dtype):
        assert g.shape == r.shape and g.dtype == q.dtype, name
        assert torch.isfinite(g).all(), name
        err = (g.double() - r).abs().max().item()
        budget = (t.double() - r).abs().max().item()
        floor = FLOOR[q.dtype] * max(1.0, r.abs().max().item())
        assert err <= 2 * budget + floor, f"{name}: error {err:.3g} > 2 x {budget:.3g} + {floor:.3g}"


@st.composite
def problems(draw, device):
    dtypes = [torch.float16, torch.bfloat16] + ([torch.float32] if device == "cpu" else [])
    h_kv = draw(st.integers(1, 2))
    return dict(
        batch=draw(st.integers(1, 2)), n_q=draw(st.integers(1, 150)), n_k=draw(st.integers(1, 150)),
        h_q=h_kv * draw(st.integers(1, 3)), h_kv=h_kv,
        d=draw(st.sampled_from(GPU_HEAD_DIMS[device]) if device != "cpu" else st.integers(1, 80)),
        dtype=draw(st.sampled_from(dtypes)), causal=draw(st.booleans()),
        mapping=draw(st.sampled_from(MAPPINGS)), num_xcds=draw(st.integers(1, 8)),
        deterministic=draw(st.booleans()), seed=draw(st.integers(0, 2**16)))


@pytest.mark.parametrize("device", DEVICES)
def test_grads_match_reference(device):
    @given(problems(device))
    def check(pb):
        q, k, v, dout = make_inputs(pb["batch"], pb["n_q"], pb["n_k"], pb["h_q"], pb["h_kv"],
                                    pb["d"], pb["dtype"], device, pb["seed"])
        got = chiplet_grads(q, k, v, dout, pb["causal"], pb["mapping"], pb["num_xcds"],
                            pb["deterministic"])
        assert_two_x_rule(got, q, k, v, dout, pb["causal"])

    check()


@pytest.mark.parametrize("device", [d for d in DEVICES if d != "cpu"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("d, causal, deterministic", [
    (32, False, False), (32, True, True), (64, True, False), (64, False, True),
    (96, False, False), (96, True, True), (128, True, False), (128, False, True), (20, True, False),
])
def test_grads_every_kernel_head_dim(device, dtype, d, causal, deterministic):
    # Each backward head dim (fp16/bf16, causal or not, both dQ modes), and a padded one; GQA,
    # N_q > N_k with rows that see no key, neither a multiple of a tile.
    skip_unless_built(d)
    q, k, v, dout = make_inputs(1, 100, 70, 4, 2, d, dtype, device, seed=d)
    got = chiplet_grads(q, k, v, dout, causal, "swizzled_head_first", 3, deterministic)
    assert_two_x_rule(got, q, k, v, dout, causal)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("d, causal, deterministic", [
    (136, True, False), (192, False, True), (192, True, False), (224, False, False), (256, True, True),
    (256, False, False), (256, True, False),
])
def test_grads_wide_head_dims(dtype, d, causal, deterministic):
    # Above 128 sm90's consumers share 64 keys and split dK, dV by columns (padding at 136 and
    # 224); elsewhere the backward runs in column slices. Both dQ modes (deterministic on sm90 in
    # fixed point, under either mapping). N_q > N_k, GQA, neither a multiple of a tile.
    skip_unless_built(d)
    q, k, v, dout = make_inputs(2, 130, 97, 4, 2, d, dtype, "cuda", seed=d)
    for mapping in ("head_first", "block_first") if deterministic else ("head_first",):
        got = chiplet_grads(q, k, v, dout, causal, mapping, 1, deterministic)
        assert_two_x_rule(got, q, k, v, dout, causal)


@pytest.mark.parametrize("device", DEVICES)
def test_autograd_through_attention(device):
    dtype = torch.bfloat16
    q, k, v, dout = make_inputs(2, 96, 130, 8, 2, 64, dtype, device, seed=3, requires_grad=True)
    chiplet_fa.attention(q, k, v, causal=True).backward(dout)
    assert_two_x_rule((q.grad, k.grad, v.grad), q, k, v, dout, causal=True)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(1, 5, 7, 2, 1, 4), (2, 9, 4, 3, 3, 3), (1, 70, 66, 2, 1, 8)])
def test_gradcheck_fp64(shape, causal):
    q, k, v, _ = make_inputs(*shape, torch.float64, "cpu", seed=1, requires_grad=True)
    for deterministic in (False, True):
        with deterministic_algorithms(deterministic):
            assert torch.autograd.gradcheck(
                lambda q, k, v: chiplet_fa.attention(q, k, v, causal=causal), (q, k, v))


def test_float64_gradients_have_float64_precision():
    # float64 inputs get a float64 softmax_lse; a float32 one held the gradients to about 1e-7.
    q, k, v, _ = make_inputs(2, 9, 13, 4, 2, 8, torch.float64, "cpu", seed=3, requires_grad=True)
    out, lse = torch.ops.chiplet_fa.fwd(q, k, v)
    assert lse.dtype == torch.float64
    tight = dict(atol=1e-9, rtol=1e-7)
    assert torch.autograd.gradcheck(lambda q, k, v: chiplet_fa.attention(q, k, v, causal=True), (q, k, v), **tight)
    cu = torch.tensor([0, 5, 18], dtype=torch.int32)
    packed = [t.reshape(-1, *t.shape[2:])[:18].detach().requires_grad_() for t in (q, k, v)]
    assert torch.autograd.gradcheck(lambda q, k, v: chiplet_fa.flash_attn_varlen_func(q, k, v, cu, cu, 13, 13),
                                    packed, **tight)


@pytest.mark.parametrize("n_q,n_k", [(6, 6), (4, 9), (9, 4)])
def test_gradcheck_sdpa_wrapper(n_q, n_k):
    # Top-left causal alignment is built from slices and a concat: autograd must compose.
    q, k, v, _ = make_inputs(1, n_q, n_k, 4, 2, 8, torch.float64, "cpu", seed=2)
    leaves = [t.transpose(1, 2).detach().requires_grad_() for t in (q, k, v)]
    fn = lambda q, k, v: chiplet_fa.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                 enable_gqa=True)
    assert torch.autograd.gradcheck(fn, leaves)
    out = fn(*leaves)
    expected = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=True,
                                                                enable_gqa=True)
    got = torch.autograd.grad(out.sum(), leaves)
    want = torch.autograd.grad(expected.sum(), leaves)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)


def test_reference_rows_without_keys_have_zero_grads():
    # Bottom-right causal with N_q > N_k: the first N_q - N_k rows see nothing.
    q, k, v, dout = make_inputs(1, 12, 5, 2, 1, 8, torch.float32, "cpu", seed=4)
    dq, _, _ = chiplet_grads(q, k, v, dout, causal=True)
    assert (dq[:, :7] == 0).all() and (dq[:, 7:] != 0).any()


def test_empty_keys():
    q, k, v, dout = make_inputs(2, 5, 0, 2, 1, 8, torch.float32, "cpu")
    dq, dk, dv = chiplet_grads(q, k, v, dout, causal=False)
    assert (dq == 0).all() and dk.shape == k.shape and dv.shape == v.shape


# out.sum().backward() hands the op an expanded dout (every stride 0): a 1x1x1x1 or empty one is
# "contiguous" to torch whatever its strides, so it reaches the op as it is.
DENSE_CALLS = {
    "fwd": lambda q, k, v: torch.ops.chiplet_fa.fwd(q, k, v)[0],
    "attention": chiplet_fa.attention,
    "flash_attn_func": chiplet_fa.flash_attn_func,
}


@pytest.mark.parametrize("call", DENSE_CALLS)
@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (0, 3, 2, 8), (2, 0, 2, 8), (2, 3, 2, 8)])
def test_sum_backward_needs_no_dout(call, shape):
    q, k, v = (torch.randn(shape, dtype=torch.float64, requires_grad=True) for _ in range(3))
    DENSE_CALLS[call](q, k, v).sum().backward()
    want = torch.autograd.grad(attention_ref(q, k, v, causal=False).sum(), (q, k, v))
    for got, w in zip((q.grad, k.grad, v.grad), want):
        torch.testing.assert_close(got, w)


VARLEN_CALLS = {
    "fwd_varlen": lambda q, k, v, cu, n: torch.ops.chiplet_fa.fwd_varlen(q, k, v, cu, cu, n, n)[0],
    "flash_attn_varlen_func": lambda q, k, v, cu, n: chiplet_fa.flash_attn_varlen_func(q, k, v, cu, cu, n, n),
}


@pytest.mark.parametrize("call", VARLEN_CALLS)
@pytest.mark.parametrize("lens, heads, d", [([1], 1, 1), ([], 2, 8), ([0, 0], 2, 8), ([2, 3], 2, 8)])
def test_varlen_sum_backward_needs_no_dout(call, lens, heads, d):
    cu = torch.tensor([0] + list(itertools.accumulate(lens)), dtype=torch.int32)
    q, k, v = (torch.randn(sum(lens), heads, d, dtype=torch.float64, requires_grad=True) for _ in range(3))
    VARLEN_CALLS[call](q, k, v, cu, max(lens, default=0)).sum().backward()
    want = [torch.zeros_like(t) for t in (q, k, v)]
    for a, b in zip(cu.tolist(), cu.tolist()[1:]):
        seq = [t[a:b].unsqueeze(0).detach().requires_grad_() for t in (q, k, v)]
        for w, g in zip(want, torch.autograd.grad(attention_ref(*seq, causal=False).sum(), seq)):
            w[a:b] = g[0]
    for got, w in zip((q.grad, k.grad, v.grad), want):
        torch.testing.assert_close(got, w)


@pytest.mark.parametrize("device", DEVICES)
def test_deterministic_is_bitwise_reproducible(device):
    # dQ comes from one workgroup per row block (the dQ pass) or, on sm90, from fixed-point sums,
    # which do not depend on the order the shares land in; dK/dV from one workgroup per key block:
    # no result may depend on the mapping, the number of L2 domains, threads or run.
    q, k, v, dout = make_inputs(2, 200, 170, 6, 2, 40, torch.bfloat16, device, seed=5)
    runs = {(m, x): chiplet_grads(q, k, v, dout, True, m, x, deterministic=True)
            for m in MAPPINGS for x in (1, 3, 8)}
    if device in ("cpu", "emulated"):
        with num_threads(1):
            runs["head_first", 1, "one thread"] = chiplet_grads(q, k, v, dout, True, "head_first", 1,
                                                                deterministic=True)
    first = runs[("block_first", 1)]
    for key, run in runs.items():
        for a, b in zip(first, run):
            assert torch.equal(a, b), key
    racy = chiplet_grads(q, k, v, dout, True, "swizzled_head_first", 8, deterministic=False)
    for a, b in zip(first, racy):
        torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-2)


@needs_cuda
@pytest.mark.gpu
def test_deterministic_dq_over_the_range_of_row_magnitudes():
    # sm90's fixed-point dQ takes a unit per row from a bound on its |dQ|: rows of dO at zero, at
    # 1e-30 and at 1e4 next to ordinary ones, and K, V with one large entry (a loose bound). The
    # gradients keep the 2x rule; the scaled rows match the atomic mode's fp32 sums to bf16's
    # precision (a row whose dQ cancels far below its bound is resolved only to bound * 2^-30,
    # which the 2x rule covers); a NaN in a row of dO gives a NaN row of dQ in both modes.
    q, k, v, dout = make_inputs(1, 300, 260, 4, 2, 128, torch.bfloat16, "cuda", seed=7)
    dout[0, 50] = 0
    dout[0, 51] *= 1e-30
    dout[0, 52] *= 1e4
    k[0, 3, 1, 5] = 60.0
    v[0, 7, 0, 9] = -80.0
    for causal in (False, True):
        exact = chiplet_grads(q, k, v, dout, causal, deterministic=True)
        assert_two_x_rule(exact, q, k, v, dout, causal)
        atomic = chiplet_grads(q, k, v, dout, causal, deterministic=False)[0]
        assert (exact[0][0, 50] == 0).all()
        for row in (51, 52):  # rows that see keys under the causal mask too (N_q > N_k)
            a, b = exact[0][0, row].float(), atomic[0, row].float()
            assert ((a - b).abs() / b.abs().amax(dim=-1, keepdim=True)).max() < 2e-2, row
    dout[0, 20, 1, 3] = float("nan")
    for deterministic in (True, False):
        dq = chiplet_grads(q, k, v, dout, False, deterministic=deterministic)[0]
        assert dq[0, 20, 1].isnan().all() and not dq[0, 21].isnan().any()


def deterministic_dq_case(n_q, n_k, h_q, h_kv, d, mask, lens=None, seed=0):
    """Gradients of one problem, deterministic or not: on sm90 the main pass adds a deterministic
    dQ in fixed point (BwdParams::dq_scale). With lens, one packed batch of those sequences
    (n_q, n_k None)."""
    if lens is not None:
        n_q = n_k = sum(lens)
    q, k, v, dout = make_inputs(1, n_q, n_k, h_q, h_kv, d, torch.bfloat16, "cuda", seed=seed)
    window = {"causal": (-1, 0), "window": (100, 37), None: (-1, -1)}[mask]
    if lens is None:
        def grads(deterministic, mapping="head_first", num_xcds=1):
            out, lse = torch.ops.chiplet_fa.fwd(q, k, v, None, False, mapping, num_xcds, *window)
            return torch.ops.chiplet_fa.bwd(dout, q, k, v, out, lse, None, False, mapping, num_xcds,
                                            deterministic, *window)
    else:
        cu = torch.tensor([0, *itertools.accumulate(lens)], dtype=torch.int32, device="cuda")
        q, k, v, dout = (t[0].contiguous() for t in (q, k, v, dout))

        def grads(deterministic, mapping="head_first", num_xcds=1):
            args = (q, k, v, cu, cu, max(lens), max(lens), None, False, *window)
            out, lse = torch.ops.chiplet_fa.fwd_varlen(*args, mapping=mapping, num_xcds=num_xcds)
            return torch.ops.chiplet_fa.bwd_varlen(dout, q, k, v, out, lse, cu, cu, max(lens), max(lens), None,
                                                   False, *window, mapping=mapping, num_xcds=num_xcds,
                                                   deterministic=deterministic)
    return (q, k, v, dout), grads


@needs_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("n_q, n_k, h_q, h_kv, d, mask, lens", [
    (700, 900, 4, 2, 128, None, None), (900, 700, 2, 2, 96, "causal", None), (1000, 1000, 4, 1, 128, "window", None),
    (None, None, 2, 2, 128, "causal", [300, 1, 517, 64]), (None, None, 3, 1, 72, None, [129, 640]),
    (700, 900, 4, 2, 64, "causal", None), (1000, 1000, 2, 1, 40, "window", None),
    (None, None, 2, 2, 64, None, [300, 1, 517, 64]),
])
def test_deterministic_dq_is_bitwise_reproducible_and_correct(n_q, n_k, h_q, h_kv, d, mask, lens):
    # Key blocks of 128 and query blocks of 64: several shares per query block, windows, GQA,
    # N_q != N_k and packed sequences; at D = 64 the consumers take the one dQ panel in turn.
    inputs, grads = deterministic_dq_case(n_q, n_k, h_q, h_kv, d, mask, lens)
    first = grads(True)
    for again in [grads(True) for _ in range(3)] + [grads(True, "swizzled_head_first", 1)]:
        assert all(torch.equal(a, b) for a, b in zip(first, again))
    for a, b in zip(first, grads(False)):  # the atomic mode's sums in another order
        torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-2)
    if lens is None and mask != "window":
        assert_two_x_rule(first, *inputs, causal=mask == "causal")


@needs_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("mask", [None, "causal", "window"])
@pytest.mark.parametrize("d, q_heads", [(64, 1), (128, 2)])
def test_deterministic_dq_on_a_grid_past_the_resident_workgroups(mask, d, q_heads):
    # 32K keys: 256 key blocks per head, more than the GPU holds at once: a query block's shares
    # come from workgroups dispatched far apart, in an order that changes from run to run.
    inputs, grads = deterministic_dq_case(32768, 32768, q_heads, 1, d, mask, seed=1)
    first, again = grads(True), grads(True)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    for a, b in zip(first, grads(False)):
        torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-2)


@needs_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("lens", [None, [300, 1, 517, 64]])
@pytest.mark.parametrize("deterministic", [False, True])
def test_dq_accumulator_starts_from_zero(lens, deterministic):
    # dq_accum is allocated uninitialised and cleared by the preprocess (dense) or the binding
    # (packed): blocks of its size left full of NaN in torch's caching allocator, where it is
    # then allocated, must not reach dQ.
    inputs, grads = deterministic_dq_case(700, 900, 4, 2, 128, "causal", lens, seed=3)
    want = grads(deterministic)
    poison = [torch.full((inputs[0].numel(),), float("nan"), device="cuda") for _ in range(6)]
    del poison
    for a, b in zip(grads(deterministic), want):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-2)


@needs_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("mask, lens", [("causal", None), ("window", None), ("causal", [3000, 1, 4096, 700])])
def test_gqa_group_split_over_workgroups(mask, lens):
    # Under a mask with G x N x D x 8 bytes over 25 MB (here 8 x 4096 x 128), sm90's backward
    # gives each query head of a KV block a workgroup of its own, which adds its partial dK and
    # dV in fp32, or in deterministic mode writes them to an fp32 slice of its own that the binding
    # sums after the kernel (kernel_binding.h, kv_split_for). The slices are allocated uninitialised:
    # memory of their size left full of NaN must not reach dK or dV.
    inputs, grads = deterministic_dq_case(4096, 4096, 8, 1, 128, mask, lens)
    poison = [torch.full((8 * 4096 * 128,), float("nan"), device="cuda") for _ in range(8)]
    del poison
    first = grads(True)
    for again in (grads(True), grads(True, "block_first", 1)):
        assert all(torch.equal(a, b) for a, b in zip(first, again))
    atomic = grads(False)
    for a, b in zip(atomic, first):
        assert torch.isfinite(b).all()
        torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-2)
    if lens is None and mask == "causal":
        assert_two_x_rule(atomic, *inputs, causal=True)
        assert_two_x_rule(first, *inputs, causal=True)


def test_torch_deterministic_switch_selects_deterministic_mode():
    q, k, v, dout = make_inputs(1, 130, 90, 4, 1, 24, torch.float32, "cpu", seed=6,
                                requires_grad=True)
    want = chiplet_grads(q.detach(), k.detach(), v.detach(), dout, False, deterministic=True)
    with deterministic_algorithms(True):
        got = torch.autograd.grad(chiplet_fa.attention(q, k, v), (q, k, v), dout)
    for a, b in zip(got, want):
        assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_opcheck_fwd_with_autograd(dtype):
    q, k, v, _ = make_inputs(2, 33, 47, 4, 2, 16, dtype, "cpu", seed=7, requires_grad=True)
    for causal in (False, True):
        torch.library.opcheck(torch.ops.chiplet_fa.fwd.default, (q, k, v, None, causal, "auto", -1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_opcheck_bwd(dtype):
    q, k, v, dout = make_inputs(2, 33, 47, 4, 2, 16, dtype, "cpu", seed=8)
    out, lse = torch.ops.chiplet_fa.fwd(q, k, v, 0.3, True, "auto", -1)
    args = (dout, q, k, v, out, lse, 0.3, True, "swizzled_block_first", 3, True)
    torch.library.opcheck(torch.ops.chiplet_fa.bwd.default, args)
    grad_args = tuple(a.detach().requires_grad_() if isinstance(a, torch.Tensor) and a.is_floating_point()
                      else a for a in args)
    torch.library.opcheck(torch.ops.chiplet_fa.bwd.default, grad_args,
                          test_utils=("test_schema", "test_autograd_registration"))


def test_double_backward_raises():
    q, k, v, dout = make_inputs(1, 8, 8, 2, 1, 8, torch.float64, "cpu", requires_grad=True)
    dq, = torch.autograd.grad(chiplet_fa.attention(q, k, v), (q,), dout, create_graph=True)
    with pytest.raises(NotImplementedError, match="double backward"):
        dq.sum().backward()


def test_compiled_training_step_matches_eager():
    torch.manual_seed(0)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = torch.nn.Linear(32, 3 * 32)
            self.proj = torch.nn.Linear(32, 32)

        def forward(self, x):
            b, n, _ = x.shape
            q, k, v = self.qkv(x).view(b, n, 3, 4, 8).unbind(2)
            return self.proj(chiplet_fa.attention(q, k, v, causal=True).reshape(b, n, 32))

    eager = Block()
    compiled_model = Block()
    compiled_model.load_state_dict(eager.state_dict())
    x = torch.randn(2, 50, 32)
    target = torch.randn(2, 50, 32)

    def train_step(model, opt):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), target)
        loss.backward()
        opt.step()
        return loss.detach()

    compiled_forward = torch.compile(compiled_model, fullgraph=True)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt_c = torch.optim.SGD(compiled_model.parameters(), lr=0.1)
    for _ in range(2):
        loss_e = train_step(eager, opt_e)
        loss_c = train_step(compiled_forward, opt_c)
        torch.testing.assert_close(loss_c, loss_e, rtol=1e-5, atol=1e-6)
    for pe, pc in zip(eager.parameters(), compiled_model.parameters()):
        torch.testing.assert_close(pc, pe, rtol=1e-5, atol=1e-6)


def test_bwd_argument_errors():
    q, k, v, dout = make_inputs(1, 6, 7, 2, 1, 8, torch.float32, "cpu")
    out, lse = torch.ops.chiplet_fa.fwd(q, k, v)
    bwd = torch.ops.chiplet_fa.bwd
    with pytest.raises(ValueError, match="dout must have the shape of q"):
        bwd(dout[:, :5], q, k, v, out, lse)
    with pytest.raises(ValueError, match="out has dtype"):
        bwd(dout, q, k, v, out.double(), lse)
    with pytest.raises(ValueError, match="softmax_lse must be float32"):
        bwd(dout, q, k, v, out, lse.double())
    with pytest.raises(ValueError, match=r"softmax_lse must be float64 \(q is float64\)"):
        bwd(*(t.double() for t in (dout, q, k, v, out)), lse)
    with pytest.raises(ValueError, match=r"softmax_lse must have shape \(1, 2, 6\)"):
        bwd(dout, q, k, v, out, lse[:, :1])
    with pytest.raises(ValueError, match="softmax_lse must be contiguous"):
        bwd(dout, q, k, v, out, lse.transpose(1, 2).contiguous().transpose(1, 2))
    with pytest.raises(ValueError, match="chiplet_fa.bwd: num_heads of q"):
        bwd(dout, q, k.expand(1, 7, 3, 8), v.expand(1, 7, 3, 8), out, lse)
    with pytest.raises(ValueError, match="mapping must be one of"):
        bwd(dout, q, k, v, out, lse, mapping="diagonal")
    with pytest.raises(ValueError, match="dout must have a contiguous last dimension"):
        bwd(torch.randn(1, 6, 2, 16)[..., ::2], q, k, v, out, lse)


def test_reference_matches_torch_sdpa():
    # The reference itself, against torch's math path (square causal, where both agree).
    q, k, v, _ = make_inputs(1, 10, 10, 4, 2, 8, torch.float64, "cpu", seed=9)
    want = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True, enable_gqa=True)
    torch.testing.assert_close(attention_ref(q, k, v, causal=True), want.transpose(1, 2))
