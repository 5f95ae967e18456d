"""Masks and score modifiers (window, softcap, ALiBi) and packed variable-length batches,
forward and backward, against the fp64 reference under flash-attention's 2x rule; the packed ops'
out= overload, autograd, opcheck and argument errors. Runs on the CPU and (marked gpu) on a GPU."""
import itertools

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import chiplet_fa
from _bwd_reference import attention_ref as diff_ref
from devices import DEVICES, built_gpu_head_dims
from reference import assert_close_to_ref, attention_ref, varlen_ref

OUT_FLOOR = {torch.float16: 1e-3, torch.bfloat16: 8e-3, torch.float32: 1e-5, torch.float64: 1e-10}
GRAD_FLOOR = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 1e-5, torch.float64: 1e-9}
MAPPINGS = ("block_first", "head_first", "swizzled_block_first", "swizzled_head_first")


@st.composite
def masks(draw, heads, batch):
    """causal, window (left, right), softcap, alibi slopes (none, per head or per batch x head)."""
    causal = draw(st.booleans())
    window = (draw(st.sampled_from([-1, 0, 1, 5, 40])), draw(st.sampled_from([-1, 0, 3, 70])))
    softcap = draw(st.sampled_from([0.0, 0.0, 2.5, 30.0]))
    alibi = draw(st.sampled_from([None, "head", "batch"]))
    slopes = None
    if alibi:
        gen = torch.Generator().manual_seed(draw(st.integers(0, 99)))
        slopes = torch.rand((heads,) if alibi == "head" else (batch, heads), generator=gen) * 0.3
    return dict(causal=causal, window=window, softcap=softcap, alibi_slopes=slopes)


def dtypes_for(device):
    return [torch.float16, torch.bfloat16] + ([torch.float32] if device == "cpu" else [])


def head_dims_for(device):
    # Above 128 the GPU backward runs sm90's shared-key kernel (200 on its D = 256 instantiation)
    # or, elsewhere, two column slices. On the CPU device half-precision draws run the emulated
    # cdna3 kernels in an emulated build, whose tiles above 128 are their own.
    gpu = [8, 16, 24, 40, 64, 72, 128] + ([200, 256] if device == "cuda" else [])
    gpu = built_gpu_head_dims(gpu) if device == "cuda" else gpu
    return st.sampled_from(gpu) if device != "cpu" else st.one_of(st.integers(1, 72), st.sampled_from([200, 256]))


def rand(shape, dtype, device, gen):
    return torch.randn(shape, generator=gen, dtype=torch.float64).to(device, dtype)


def op_masks(m, device):
    slopes = m["alibi_slopes"]
    return dict(causal=m["causal"], window_left=m["window"][0], window_right=m["window"][1],
                softcap=m["softcap"], alibi_slopes=None if slopes is None else slopes.to(device))


def two_x_grads(got, q, k, v, dout, reference):
    """Each gradient's error vs fp64 at most 2x torch's in the input dtype, plus a floor."""
    def grads(dtype):
        leaves = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
        out = reference(*leaves)
        if not out.requires_grad:  # nothing to differentiate (no query or no key at all)
            return [torch.zeros_like(t) for t in leaves]
        got = torch.autograd.grad(out, leaves, dout.to(dtype), allow_unused=True)
        return [torch.zeros_like(t) if g is None else g for g, t in zip(got, leaves)]
    ref, low = grads(torch.float64), grads(q.dtype)
    for name, g, r, t in zip(("dq", "dk", "dv"), got, ref, low):
        assert g.shape == r.shape and g.dtype == q.dtype and torch.isfinite(g).all(), name
        err = (g.double().cpu() - r.cpu()).abs().max().item() if g.numel() else 0.0
        budget = (t.double().cpu() - r.cpu()).abs().max().item() if g.numel() else 0.0
        floor = GRAD_FLOOR[q.dtype] * max(1.0, r.abs().max().item() if r.numel() else 0.0)
        assert err <= 2 * budget + floor, f"{name}: error {err:.3g} > 2 x {budget:.3g} + {floor:.3g}"


@st.composite
def dense_problems(draw, device):
    h_kv = draw(st.integers(1, 2))
    batch, h_q = draw(st.integers(1, 2)), h_kv * draw(st.integers(1, 3))
    return dict(batch=batch, n_q=draw(st.integers(1, 140)), n_k=draw(st.integers(1, 140)), h_q=h_q, h_kv=h_kv,
                d=draw(head_dims_for(device)), dtype=draw(st.sampled_from(dtypes_for(device))),
                mask=draw(masks(h_q, batch)), mapping=draw(st.sampled_from(MAPPINGS)),
                deterministic=draw(st.booleans()), seed=draw(st.integers(0, 2**16)))


@pytest.mark.parametrize("device", DEVICES)
def test_masked_dense_forward_and_backward_match_reference(device):
    @given(dense_problems(device))
    def check(pb):
        gen = torch.Generator().manual_seed(pb["seed"])
        q = rand((pb["batch"], pb["n_q"], pb["h_q"], pb["d"]), pb["dtype"], device, gen)
        k, v = (rand((pb["batch"], pb["n_k"], pb["h_kv"], pb["d"]), pb["dtype"], device, gen) for _ in range(2))
        dout = rand(q.shape, pb["dtype"], device, gen)
        m = pb["mask"]
        kw = op_masks(m, device)
        out, lse = torch.ops.chiplet_fa.fwd(q, k, v, None, kw["causal"], pb["mapping"], 8, kw["window_left"],
                                            kw["window_right"], kw["softcap"], kw["alibi_slopes"])
        ref_kw = dict(causal=m["causal"], window=m["window"], softcap=m["softcap"], alibi_slopes=m["alibi_slopes"])
        out_ref, lse_ref = attention_ref(q.cpu(), k.cpu(), v.cpu(), **ref_kw)
        out_pt, lse_pt = attention_ref(q.cpu(), k.cpu(), v.cpu(), dtype=q.dtype, **ref_kw)
        assert_close_to_ref(out, out_ref, out_pt, OUT_FLOOR[q.dtype], "out")
        assert_close_to_ref(lse, lse_ref, lse_pt.float(), 1e-3, "lse")
        grads = torch.ops.chiplet_fa.bwd(dout, q, k, v, out, lse, None, kw["causal"], pb["mapping"], 8,
                                         pb["deterministic"], kw["window_left"], kw["window_right"], kw["softcap"],
                                         kw["alibi_slopes"])
        two_x_grads([g.cpu() for g in grads], q.cpu(), k.cpu(), v.cpu(), dout.cpu(),
                    lambda q, k, v: diff_ref(q, k, v, **ref_kw))

    check()


@st.composite
def packed_problems(draw, device):
    """A packed batch: lengths from 0 up, not multiples of any tile, N_q and N_k per sequence."""
    batch = draw(st.integers(1, 4))
    lens_q = draw(st.lists(st.integers(0, 150), min_size=batch, max_size=batch))
    same = draw(st.booleans())
    lens_k = lens_q if same else draw(st.lists(st.integers(0, 150), min_size=batch, max_size=batch))
    h_kv = draw(st.integers(1, 2))
    h_q = h_kv * draw(st.integers(1, 3))
    return dict(lens_q=lens_q, lens_k=lens_k, h_q=h_q, h_kv=h_kv, d=draw(head_dims_for(device)),
                dtype=draw(st.sampled_from(dtypes_for(device))), mask=draw(masks(h_q, batch)),
                mapping=draw(st.sampled_from(MAPPINGS)), deterministic=draw(st.booleans()),
                slack=draw(st.integers(0, 9)), seed=draw(st.integers(0, 2**16)))


def cu_seqlens(lens, device):
    return torch.tensor([0] + list(itertools.accumulate(lens)), dtype=torch.int32, device=device)


def packed_inputs(pb, device):
    gen = torch.Generator().manual_seed(pb["seed"])
    t_q, t_k = sum(pb["lens_q"]), sum(pb["lens_k"])
    q = rand((t_q, pb["h_q"], pb["d"]), pb["dtype"], device, gen)
    k, v = (rand((t_k, pb["h_kv"], pb["d"]), pb["dtype"], device, gen) for _ in range(2))
    dout = rand(q.shape, pb["dtype"], device, gen)
    cu_q, cu_k = cu_seqlens(pb["lens_q"], device), cu_seqlens(pb["lens_k"], device)
    # max lengths may exceed the longest sequence (vLLM passes bucket sizes)
    return q, k, v, dout, cu_q, cu_k, max(pb["lens_q"]) + pb["slack"], max(pb["lens_k"]) + pb["slack"]


@pytest.mark.parametrize("device", DEVICES)
def test_packed_forward_and_backward_match_reference(device):
    @given(packed_problems(device))
    def check(pb):
        q, k, v, dout, cu_q, cu_k, max_q, max_k = packed_inputs(pb, device)
        m = pb["mask"]
        kw = op_masks(m, device)
        out, lse = torch.ops.chiplet_fa.fwd_varlen(q, k, v, cu_q, cu_k, max_q, max_k, None, **kw,
                                                   mapping=pb["mapping"], num_xcds=8)
        assert out.shape == q.shape and lse.shape == (pb["h_q"], q.shape[0])
        ref_kw = dict(causal=m["causal"], window=m["window"], softcap=m["softcap"], alibi_slopes=m["alibi_slopes"])
        args = (q.cpu(), k.cpu(), v.cpu(), cu_q.cpu(), cu_k.cpu())
        out_ref, lse_ref = varlen_ref(*args, **ref_kw)
        out_pt, lse_pt = varlen_ref(*args, dtype=q.dtype, **ref_kw)
        assert_close_to_ref(out, out_ref, out_pt, OUT_FLOOR[q.dtype], "out")
        assert_close_to_ref(lse, lse_ref, lse_pt.float(), 1e-3, "lse")
        grads = torch.ops.chiplet_fa.bwd_varlen(dout, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, None, **kw,
                                                mapping=pb["mapping"], num_xcds=8, deterministic=pb["deterministic"])
        two_x_grads([g.cpu() for g in grads], q.cpu(), k.cpu(), v.cpu(), dout.cpu(),
                    lambda q, k, v: varlen_ref(q, k, v, cu_q.cpu(), cu_k.cpu(), reference=diff_ref, **ref_kw))

    check()


@pytest.mark.parametrize("device", DEVICES)
def test_packed_batch_of_equal_lengths_equals_the_dense_batch(device):
    dtype = torch.bfloat16 if device != "cpu" else torch.float32
    gen = torch.Generator().manual_seed(3)
    q = rand((3, 77, 4, 32), dtype, device, gen)
    k, v = (rand((3, 90, 2, 32), dtype, device, gen) for _ in range(2))
    cu_q, cu_k = cu_seqlens([77] * 3, device), cu_seqlens([90] * 3, device)
    for mapping in MAPPINGS:
        dense, dense_lse = torch.ops.chiplet_fa.fwd(q, k, v, None, True, mapping, 8)
        packed, packed_lse = torch.ops.chiplet_fa.fwd_varlen(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1),
                                                             cu_q, cu_k, 77, 90, causal=True, mapping=mapping, num_xcds=8)
        assert torch.equal(packed, dense.flatten(0, 1)), mapping
        assert torch.equal(packed_lse, dense_lse.permute(1, 0, 2).flatten(1)), mapping


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal", [False, True])
def test_sequences_of_a_packed_batch_do_not_read_each_other(device, causal):
    # Non-finite rows in the middle sequence must leave its neighbours' results and gradients
    # bit for bit as they are; no length is a multiple of a tile, so every sequence's last tiles
    # reach into its neighbour's rows.
    dtype = torch.bfloat16 if device != "cpu" else torch.float32
    gen = torch.Generator().manual_seed(11)
    lens = [70, 130, 50]
    cu = cu_seqlens(lens, device)
    q, k, v, dout = (rand((sum(lens), heads, 64), dtype, device, gen) for heads in (4, 2, 2, 4))
    middle = slice(lens[0], lens[0] + lens[1])

    def run(q, k, v):
        out, lse = torch.ops.chiplet_fa.fwd_varlen(q, k, v, cu, cu, 130, 130, causal=causal)
        grads = torch.ops.chiplet_fa.bwd_varlen(dout, q, k, v, out, lse, cu, cu, 130, 130, causal=causal)
        return (out, lse.t()) + tuple(grads)

    clean = run(q, k, v)
    for t, value in ((q, float("nan")), (k, float("inf")), (v, float("nan"))):
        t[middle] = value
    dirty = run(q, k, v)
    outside = torch.ones(sum(lens), dtype=torch.bool, device=device)
    outside[middle] = False
    for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), clean, dirty):
        assert torch.equal(a[outside], b[outside]), name


@pytest.mark.parametrize("device", DEVICES)
def test_out_overload_writes_into_the_given_tensor(device):
    dtype = torch.float16 if device != "cpu" else torch.float32
    q, k, v = (torch.randn(50, 2, 16, dtype=dtype, device=device) for _ in range(3))
    cu = cu_seqlens([20, 0, 30], device)
    out = torch.full_like(q, float("nan"))
    lse = torch.ops.chiplet_fa.fwd_varlen(q, k, v, cu, cu, 30, 30, causal=True, out=out)
    want, want_lse = torch.ops.chiplet_fa.fwd_varlen(q, k, v, cu, cu, 30, 30, causal=True)
    assert torch.equal(out, want) and torch.equal(lse, want_lse)
    with pytest.raises(ValueError, match="out must have the shape of q"):
        torch.ops.chiplet_fa.fwd_varlen(q, k, v, cu, cu, 30, 30, out=out[:10])


def test_autograd_through_packed_attention_gradcheck():
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(11, 2, 4, generator=gen, dtype=torch.float64, requires_grad=True) for _ in range(3))
    cu = cu_seqlens([4, 0, 7], "cpu")
    slopes = torch.tensor([0.2, 0.05])

    def fn(q, k, v):
        return torch.ops.chiplet_fa.fwd_varlen(q, k, v, cu, cu, 7, 7, None, True, 2, -1, 1.5, slopes)[0]

    assert torch.autograd.gradcheck(fn, (q, k, v))


def test_gradcheck_windowed_softcapped_alibi_dense():
    gen = torch.Generator().manual_seed(6)
    q = torch.randn(2, 9, 2, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(2, 7, 1, 4, generator=gen, dtype=torch.float64, requires_grad=True) for _ in range(2))
    slopes = torch.rand(2, 2, generator=gen, dtype=torch.float32)
    fn = lambda q, k, v: chiplet_fa.attention(q, k, v, window_size=(3, 1), softcap=2.0,  # noqa: E731
                                              alibi_slopes=slopes)
    assert torch.autograd.gradcheck(fn, (q, k, v))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_opcheck_packed_ops(dtype):
    gen = torch.Generator().manual_seed(7)
    q, k, v, dout = (torch.randn(40, 4, 16, generator=gen, dtype=dtype) for _ in range(4))
    k, v = k[:, :2].contiguous(), v[:, :2].contiguous()
    cu = cu_seqlens([13, 27], "cpu")
    slopes = torch.rand(4, generator=gen)
    args = (q, k, v, cu, cu, 27, 27, 0.3, True, 8, -1, 4.0, slopes, "swizzled_head_first", 3)
    torch.library.opcheck(torch.ops.chiplet_fa.fwd_varlen.default, args)
    grad_args = tuple(a.detach().requires_grad_() if torch.is_tensor(a) and a.is_floating_point() and a is not slopes
                      else a for a in args)
    torch.library.opcheck(torch.ops.chiplet_fa.fwd_varlen.default, grad_args)
    out, lse = torch.ops.chiplet_fa.fwd_varlen(*args)
    bwd_args = (dout, q, k, v, out, lse, cu, cu, 27, 27, 0.3, True, 8, -1, 4.0, slopes, "swizzled_head_first", 3,
                True)
    torch.library.opcheck(torch.ops.chiplet_fa.bwd_varlen.default, bwd_args)
    torch.library.opcheck(torch.ops.chiplet_fa.fwd_varlen.out, args, {"out": torch.empty_like(q)})


def test_packed_attention_compiles_fullgraph():
    gen = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(30, 2, 8, generator=gen) for _ in range(3))
    cu = cu_seqlens([10, 20], "cpu")

    def fn(q, k, v):
        return torch.ops.chiplet_fa.fwd_varlen(q, k, v, cu, cu, 20, 20, causal=True, window_left=4)[0] * 2

    torch.testing.assert_close(torch.compile(fn, fullgraph=True)(q, k, v), fn(q, k, v))


PACKED_ERRORS = {
    "cu dtype": (dict(cu_seqlens_q=lambda cu: cu.long()), "cu_seqlens_q must be a 1-D int32 tensor"),
    "cu batch": (dict(cu_seqlens_k=lambda cu: cu[:2]), "cu_seqlens_k must have batch \\+ 1 = 3 entries"),
    "cu start": (dict(cu_seqlens_q=lambda cu: cu + 1), "cu_seqlens_q must start at 0 and end at the 30 rows"),
    "cu order": (dict(cu_seqlens_k=lambda cu: torch.tensor([0, 25, 30], dtype=torch.int32)),
                 "cu_seqlens_k must be non-decreasing with no sequence longer than max_seqlen_k = 20"),
    "max too small": (dict(max_seqlen_q=lambda n: 5), "no sequence longer than max_seqlen_q = 5"),
    "max negative": (dict(max_seqlen_k=lambda n: -1), "max_seqlen_k must be in 0..2\\^29"),
    "rank": (dict(q=lambda t: t[None]), "q must be 3-D \\(total_tokens, num_heads, head_dim\\)"),
    "window": (dict(window_left=lambda w: -2), "window_size entries must be >= -1"),
    "softcap": (dict(softcap=lambda s: -1.0), "softcap must be finite and >= 0"),
    "alibi shape": (dict(alibi_slopes=lambda s: torch.ones(3)), "alibi_slopes must have shape \\(2,\\) or \\(2, 2\\)"),
    "alibi dtype": (dict(alibi_slopes=lambda s: torch.ones(2, dtype=torch.float64)), "alibi_slopes must be float32"),
}


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("case", PACKED_ERRORS)
def test_packed_bad_input_raises_value_error_naming_it(device, case):
    changes, match = PACKED_ERRORS[case]
    if device == "meta" and case in ("cu start", "cu order", "max too small"):
        pytest.skip("values of cu_seqlens are not known without data")
    args = dict(q=torch.randn(30, 2, 8), k=torch.randn(30, 2, 8), v=torch.randn(30, 2, 8),
                cu_seqlens_q=torch.tensor([0, 10, 30], dtype=torch.int32),
                cu_seqlens_k=torch.tensor([0, 10, 30], dtype=torch.int32), max_seqlen_q=20, max_seqlen_k=20,
                window_left=-1, softcap=0.0, alibi_slopes=None)
    for name, change in changes.items():
        args[name] = change(args[name])
    args = {n: a.to(device) if torch.is_tensor(a) else a for n, a in args.items()}
    with pytest.raises(ValueError, match=match):
        torch.ops.chiplet_fa.fwd_varlen(**args)


@pytest.mark.parametrize("kwargs, match", [
    (dict(window_right=-3), "window_size entries must be >= -1"),
    (dict(softcap=float("nan")), "softcap must be finite"),
    (dict(alibi_slopes=torch.ones(3, 4)), r"alibi_slopes must have shape \(4,\) or \(2, 4\)"),
])
def test_dense_mask_arguments_are_checked(kwargs, match):
    q = torch.randn(2, 5, 4, 8)
    with pytest.raises(ValueError, match=match):
        torch.ops.chiplet_fa.fwd(q, q, q, **kwargs)


def test_forward_deterministic_flag_selects_the_deterministic_backward():
    gen = torch.Generator().manual_seed(9)
    q, k, v = (torch.randn(1, 70, 2, 16, generator=gen, requires_grad=True) for _ in range(3))
    dout = torch.randn(1, 70, 2, 16, generator=gen)
    out, lse = torch.ops.chiplet_fa.fwd(q, k, v, causal=True, window_left=9, deterministic=True)
    got = torch.autograd.grad(out, (q, k, v), dout)
    want = torch.ops.chiplet_fa.bwd(dout, q.detach(), k.detach(), v.detach(), out.detach(), lse, causal=True,
                                    window_left=9, deterministic=True)
    for a, b in zip(got, want):
        assert torch.equal(a, b)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal", [False, True])
def test_alibi_distances_are_bottom_right_aligned_with_or_without_a_mask(device, causal):
    # ALiBi's distance is |i + N_k - N_q - j| whether or not a window applies (found by hypothesis:
    # the unwindowed path once measured it from the top-left corner).
    dtype = torch.float16 if device != "cpu" else torch.float64
    gen = torch.Generator().manual_seed(10)
    q = rand((2, 3, 2, 16), dtype, device, gen)
    k, v = (rand((2, 11, 1, 16), dtype, device, gen) for _ in range(2))
    slopes = torch.tensor([[0.3, 0.7], [0.1, 0.5]])
    out, lse = torch.ops.chiplet_fa.fwd(q, k, v, causal=causal, alibi_slopes=slopes.to(device))
    ref, ref_lse = attention_ref(q.cpu(), k.cpu(), v.cpu(), causal=causal, alibi_slopes=slopes)
    low = attention_ref(q.cpu(), k.cpu(), v.cpu(), causal=causal, alibi_slopes=slopes, dtype=dtype)
    assert_close_to_ref(out, ref, low[0], OUT_FLOOR[dtype], "out")
    assert_close_to_ref(lse, ref_lse, low[1].float(), 1e-6, "lse")
