"""chiplet_fa's flash-attention 2 API (chiplet_fa.flash_attn_*): the signatures against flash-attention
2's, the mapping of its arguments onto the ops (results against the fp64 reference under the 2x rule
and bitwise against the ops), the packed variants, what raises, return_attn_probs and
deterministic gradients."""
import inspect
import itertools

import pytest
import torch

import chiplet_fa
from _bwd_reference import attention_ref as diff_ref
from reference import assert_close_to_ref, attention_ref, varlen_ref

# flash-attention 2's public functions (flash_attn/flash_attn_interface.py, v2.6 to v2.8): every
# parameter positional-or-keyword, in this order, with these defaults. Changing the import must be the
# whole migration, so chiplet_fa's functions take exactly these first; what follows is keyword-only.
_FA2_OPTIONS = [("dropout_p", 0.0), ("softmax_scale", None), ("causal", False), ("window_size", (-1, -1)),
                ("softcap", 0.0), ("alibi_slopes", None), ("deterministic", False), ("return_attn_probs", False)]
_REQUIRED = inspect.Parameter.empty
FA2_SIGNATURES = {
    "flash_attn_func": [("q", _REQUIRED), ("k", _REQUIRED), ("v", _REQUIRED)] + _FA2_OPTIONS,
    "flash_attn_qkvpacked_func": [("qkv", _REQUIRED)] + _FA2_OPTIONS,
    "flash_attn_kvpacked_func": [("q", _REQUIRED), ("kv", _REQUIRED)] + _FA2_OPTIONS,
    "flash_attn_varlen_func": [("q", _REQUIRED), ("k", _REQUIRED), ("v", _REQUIRED), ("cu_seqlens_q", _REQUIRED),
                               ("cu_seqlens_k", _REQUIRED), ("max_seqlen_q", _REQUIRED), ("max_seqlen_k", _REQUIRED)]
    + _FA2_OPTIONS + [("block_table", None)],
    "flash_attn_varlen_qkvpacked_func": [("qkv", _REQUIRED), ("cu_seqlens", _REQUIRED), ("max_seqlen", _REQUIRED)]
    + _FA2_OPTIONS,
    "flash_attn_varlen_kvpacked_func": [("q", _REQUIRED), ("kv", _REQUIRED), ("cu_seqlens_q", _REQUIRED),
                                        ("cu_seqlens_k", _REQUIRED), ("max_seqlen_q", _REQUIRED),
                                        ("max_seqlen_k", _REQUIRED)] + _FA2_OPTIONS,
    "flash_attn_with_kvcache": [("q", _REQUIRED), ("k_cache", _REQUIRED), ("v_cache", _REQUIRED), ("k", None),
                                ("v", None), ("rotary_cos", None), ("rotary_sin", None), ("cache_seqlens", None),
                                ("cache_batch_idx", None), ("cache_leftpad", None), ("block_table", None),
                                ("softmax_scale", None), ("causal", False), ("window_size", (-1, -1)),
                                ("softcap", 0.0), ("rotary_interleaved", True), ("alibi_slopes", None),
                                ("num_splits", 0), ("return_softmax_lse", False)],
}


@pytest.mark.parametrize("name", FA2_SIGNATURES)
def test_signature_matches_flash_attention_2(name):
    params = list(inspect.signature(getattr(chiplet_fa, name)).parameters.values())
    fa2 = FA2_SIGNATURES[name]
    got = [(p.name, p.default) for p in params[:len(fa2)]]
    assert got == fa2
    assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in params[:len(fa2)])
    extra = params[len(fa2):]
    assert [p.name for p in extra] == ["mapping", "num_xcds"]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in extra)


def rand(shape, dtype=torch.float32, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


def cu_seqlens(lens):
    return torch.tensor([0] + list(itertools.accumulate(lens)), dtype=torch.int32)


OPTIONS = [
    dict(),
    dict(causal=True),
    dict(causal=True, window_size=(5, 0), softcap=3.0),
    dict(window_size=(7, 2), softmax_scale=0.4),
    dict(causal=True, alibi_slopes="head"),
    dict(window_size=(3, -1), alibi_slopes="batch", softcap=1.5),
]


def with_slopes(opts, heads, batch):
    opts = dict(opts)
    kind = opts.get("alibi_slopes")
    if kind is not None:
        opts["alibi_slopes"] = rand((heads,) if kind == "head" else (batch, heads), seed=7).abs() * 0.3
    return opts


def ref_kwargs(opts):
    return dict(causal=opts.get("causal", False), softmax_scale=opts.get("softmax_scale"),
                window=opts.get("window_size", (-1, -1)), softcap=opts.get("softcap", 0.0),
                alibi_slopes=opts.get("alibi_slopes"))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("opts", OPTIONS)
def test_flash_attn_func_matches_reference(opts, dtype):
    q, k, v = rand((2, 37, 4, 24), dtype, 1), rand((2, 45, 2, 24), dtype, 2), rand((2, 45, 2, 24), dtype, 3)
    opts = with_slopes(opts, 4, 2)
    out, lse, s_dmask = chiplet_fa.flash_attn_func(q, k, v, return_attn_probs=True, **opts)
    out_ref, lse_ref = attention_ref(q, k, v, **ref_kwargs(opts))
    out_pt, lse_pt = attention_ref(q, k, v, dtype=dtype, **ref_kwargs(opts))
    assert_close_to_ref(out, out_ref, out_pt, 8e-3, "out")
    assert_close_to_ref(lse, lse_ref, lse_pt.float(), 1e-3, "lse")
    assert lse.shape == (2, 4, 37) and lse.dtype == torch.float32
    assert s_dmask.shape == (0,) and s_dmask.dtype == dtype


@pytest.mark.parametrize("opts", OPTIONS)
def test_flash_attn_varlen_func_matches_reference(opts):
    lens_q, lens_k = [13, 0, 30, 7], [20, 5, 30, 1]
    q, k, v = rand((50, 4, 16), seed=1), rand((56, 2, 16), seed=2), rand((56, 2, 16), seed=3)
    opts = with_slopes(opts, 4, 4)
    cu_q, cu_k = cu_seqlens(lens_q), cu_seqlens(lens_k)
    out, lse, _ = chiplet_fa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 30, 30, return_attn_probs=True, **opts)
    out_ref, lse_ref = varlen_ref(q, k, v, cu_q, cu_k, **ref_kwargs(opts))
    out_pt, lse_pt = varlen_ref(q, k, v, cu_q, cu_k, dtype=q.dtype, **ref_kwargs(opts))
    assert_close_to_ref(out, out_ref, out_pt, 1e-5, "out")
    assert_close_to_ref(lse, lse_ref, lse_pt.float(), 1e-4, "lse")
    assert lse.shape == (4, 50)


def test_arguments_reach_the_op_unchanged():
    q, k, v = rand((1, 20, 4, 8), seed=1), rand((1, 25, 2, 8), seed=2), rand((1, 25, 2, 8), seed=3)
    slopes = torch.tensor([0.1, 0.2, 0.3, 0.4])
    got = chiplet_fa.flash_attn_func(q, k, v, 0.0, 0.3, True, (4, 9), 2.0, slopes, True, True,
                                     mapping="block_first", num_xcds=3)
    want = torch.ops.chiplet_fa.fwd(q, k, v, 0.3, True, "block_first", 3, 4, 9, 2.0, slopes, True)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_flash_attention_conventions_for_negative_window_and_softcap():
    """flash-attention treats any negative window entry as unbounded and softcap <= 0 as none."""
    q, k, v = (rand((1, 30, 2, 8), seed=s) for s in range(3))
    base = chiplet_fa.flash_attn_func(q, k, v, causal=True)
    assert torch.equal(chiplet_fa.flash_attn_func(q, k, v, causal=True, window_size=(-7, -2), softcap=-1.0), base)
    assert torch.equal(chiplet_fa.flash_attn_func(q, k, v, causal=True, window_size=[-1, -1]), base)


def test_rows_without_keys_give_zero_output_and_minus_infinite_lse():
    """The one documented difference: flash-attention gives such rows lse = +inf, chiplet_fa -inf."""
    q, k, v = rand((1, 6, 1, 8), seed=1), rand((1, 2, 1, 8), seed=2), rand((1, 2, 1, 8), seed=3)
    out, lse, _ = chiplet_fa.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    assert torch.equal(out[0, :4], torch.zeros(4, 1, 8))  # rows 0..3 see no key (bottom-right causal)
    assert torch.equal(lse[0, 0, :4], torch.full((4,), float("-inf")))
    assert torch.isfinite(lse[0, 0, 4:]).all()


def test_return_attn_probs_false_returns_the_output_alone():
    q = rand((1, 9, 2, 8))
    out = chiplet_fa.flash_attn_func(q, q, q)
    assert torch.is_tensor(out) and out.shape == q.shape
    out = chiplet_fa.flash_attn_varlen_func(q[0], q[0], q[0], cu_seqlens([9]), cu_seqlens([9]), 9, 9)
    assert torch.is_tensor(out) and out.shape == q[0].shape


def test_max_seqlen_may_be_a_zero_dim_tensor():
    """transformers passes max lengths as 0-d tensors when it derives them from position_ids."""
    q = rand((30, 2, 8))
    cu = cu_seqlens([10, 20])
    want = chiplet_fa.flash_attn_varlen_func(q, q, q, cu, cu, 20, 20, causal=True)
    got = chiplet_fa.flash_attn_varlen_func(q, q, q, cu, cu, cu.diff().max(), torch.tensor(20), causal=True)
    assert torch.equal(got, want)


@pytest.mark.parametrize("fn", ["attention", "flash_attn_func"])
def test_non_contiguous_last_dimension_is_copied_as_flash_attention_does(fn):
    q = rand((1, 12, 2, 16))[..., ::2]  # stride(-1) == 2
    assert q.stride(-1) != 1
    call = getattr(chiplet_fa, fn)
    assert torch.equal(call(q, q, q), call(*(q.contiguous(),) * 3))


# Arguments both dense APIs take by one name, each bad in a way torch's parser would refuse with a
# TypeError of its own or convert silently: every one a ValueError naming it, from the API itself.
BAD_ARGUMENTS = [
    (dict(q=None), "q must be a torch.Tensor"),
    (dict(k=[[1.0]]), "k must be a torch.Tensor"),
    (dict(v=3), "v must be a torch.Tensor"),
    (dict(softcap=float("nan")), "softcap must be a finite number"),
    (dict(softcap=float("inf")), "softcap must be a finite number"),
    (dict(softcap="2"), "softcap must be a finite number"),
    (dict(softmax_scale=float("nan")), "softmax_scale must be a finite number"),
    (dict(softmax_scale=torch.tensor(0.5)), "softmax_scale must be a finite number"),
    (dict(window_size=None), r"window_size must be a pair \(left, right\) of integers"),
    (dict(window_size=(4,)), r"window_size must be a pair \(left, right\) of integers"),
    (dict(window_size=(4.5, 0)), "window_size must be an integer, got 4.5"),
    (dict(window_size=(2 ** 63, 0)), "window_size must be an integer in int64"),
    (dict(alibi_slopes=[0.5, 0.25]), "alibi_slopes must be a torch.Tensor"),
    (dict(mapping=None), "mapping must be a string"),
    (dict(num_xcds=8.0), "num_xcds must be an integer"),
    (dict(num_xcds=-2 ** 64), "num_xcds must be an integer in int64"),
]


@pytest.mark.parametrize("fn", ["attention", "flash_attn_func"])
@pytest.mark.parametrize("bad, match", BAD_ARGUMENTS)
def test_bad_arguments_raise_value_error_naming_them_in_both_apis(fn, bad, match):
    q = rand((2, 14, 2, 8))
    tensors = {n: bad.get(n, q) for n in "qkv"}
    options = {n: value for n, value in bad.items() if n not in tensors}
    with pytest.raises(ValueError, match=f"chiplet_fa.{fn}: {match}"):
        getattr(chiplet_fa, fn)(*tensors.values(), **options)


@pytest.mark.parametrize("bad, match", [
    (dict(max_seqlen_q=14.0), "max_seqlen_q must be an integer"),
    (dict(max_seqlen_k=2 ** 64), "max_seqlen_k must be an integer in int64"),
    (dict(max_seqlen_k=torch.tensor([14, 14])), "max_seqlen_k must be an integer"),
    (dict(cu_seqlens_q=[0, 10, 24]), "cu_seqlens_q must be a torch.Tensor"),
    (dict(window_size=(0, 1.0)), "window_size must be an integer"),
])
def test_bad_packed_arguments_raise_value_error_naming_them(bad, match):
    packed = rand((24, 2, 8))
    args = dict(q=packed, k=packed, v=packed, cu_seqlens_q=cu_seqlens([10, 14]), cu_seqlens_k=cu_seqlens([10, 14]),
                max_seqlen_q=14, max_seqlen_k=14)
    args.update(bad)
    with pytest.raises(ValueError, match=f"chiplet_fa.flash_attn_varlen_func: {match}"):
        chiplet_fa.flash_attn_varlen_func(**args)


@pytest.mark.parametrize("fn, args, match", [
    ("flash_attn_qkvpacked_func", (None,), "qkv must be a torch.Tensor"),
    ("flash_attn_varlen_qkvpacked_func", (rand((24, 3, 2, 8)), cu_seqlens([24]), 24.0),
     "max_seqlen must be an integer"),
    ("flash_attn_varlen_qkvpacked_func", (rand((24, 3, 2, 8)), None, 24), "cu_seqlens must be a torch.Tensor"),
])
def test_packed_forms_name_their_own_arguments(fn, args, match):
    with pytest.raises(ValueError, match=f"chiplet_fa.{fn}: {match}"):
        getattr(chiplet_fa, fn)(*args)


def test_attention_takes_flash_attentions_conventions():
    # One behaviour for both APIs: any negative window side is unbounded, softcap <= 0 is none.
    q, k, v = rand((1, 9, 2, 8), seed=1), rand((1, 11, 2, 8), seed=2), rand((1, 11, 2, 8), seed=3)
    want = chiplet_fa.attention(q, k, v, window_size=(-1, 2))
    assert torch.equal(chiplet_fa.attention(q, k, v, window_size=(-7, 2), softcap=-1.0), want)
    assert torch.equal(chiplet_fa.flash_attn_func(q, k, v, window_size=(-7, 2), softcap=-1.0), want)


UNSUPPORTED = [
    ("flash_attn_func", dict(dropout_p=0.1), "dropout_p"),
    ("flash_attn_varlen_func", dict(dropout_p=0.5), "dropout_p"),
    ("flash_attn_qkvpacked_func", dict(dropout_p=0.2), "dropout_p"),
    ("flash_attn_kvpacked_func", dict(dropout_p=0.2), "dropout_p"),
    ("flash_attn_varlen_qkvpacked_func", dict(dropout_p=0.2), "dropout_p"),
    ("flash_attn_varlen_kvpacked_func", dict(dropout_p=0.2), "dropout_p"),
    ("flash_attn_varlen_func", dict(block_table=torch.zeros(2, 1, dtype=torch.int32)), "block_table"),
    ("flash_attn_func", dict(window_size=(1, 2, 3)), "window_size"),
]


def call_args(name):
    """Valid positional arguments of each function for a 2-sequence problem of 10 + 14 tokens."""
    dense, packed = rand((2, 14, 2, 8)), rand((24, 2, 8))
    cu = cu_seqlens([10, 14])
    return {
        "flash_attn_func": (dense, dense, dense),
        "flash_attn_qkvpacked_func": (torch.stack([dense] * 3, dim=2),),
        "flash_attn_kvpacked_func": (dense, torch.stack([dense] * 2, dim=2)),
        "flash_attn_varlen_func": (packed, packed, packed, cu, cu, 14, 14),
        "flash_attn_varlen_qkvpacked_func": (torch.stack([packed] * 3, dim=1), cu, 14),
        "flash_attn_varlen_kvpacked_func": (packed, torch.stack([packed] * 2, dim=1), cu, cu, 14, 14),
    }[name]


@pytest.mark.parametrize("name, kwargs, argument", UNSUPPORTED)
def test_unsupported_arguments_raise_naming_them(name, kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        getattr(chiplet_fa, name)(*call_args(name), **kwargs)


def test_dropout_given_positionally_raises_too():
    with pytest.raises(ValueError, match="dropout_p must be 0.0"):
        chiplet_fa.flash_attn_func(*call_args("flash_attn_func"), 0.1)


def test_packed_layouts_check_their_packing_dimension():
    dense = rand((2, 14, 2, 8))
    with pytest.raises(ValueError, match="qkv must have size 3 in dimension 2"):
        chiplet_fa.flash_attn_qkvpacked_func(torch.stack([dense] * 2, dim=2))
    with pytest.raises(ValueError, match="kv must have size 2 in dimension 1"):
        chiplet_fa.flash_attn_varlen_kvpacked_func(dense[0], dense, cu_seqlens([14]), cu_seqlens([2]), 14, 2)


def test_op_errors_still_name_the_argument():
    q = rand((2, 14, 2, 8))
    with pytest.raises(ValueError, match="alibi_slopes must be float32"):
        chiplet_fa.flash_attn_func(q, q, q, alibi_slopes=torch.ones(2, dtype=torch.float64))
    with pytest.raises(ValueError, match="cu_seqlens_q must be a 1-D int32 tensor"):
        chiplet_fa.flash_attn_varlen_func(q[0], q[0], q[0], cu_seqlens([14]).long(), cu_seqlens([14]), 14, 14)


def grads_of(fn, inputs, dout):
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    out = fn(*leaves)
    return out, torch.autograd.grad(out, leaves, dout)


@pytest.mark.parametrize("causal", [False, True])
def test_packed_variants_equal_the_unpacked_functions_forward_and_backward(causal):
    q, k, v = rand((2, 19, 4, 16), seed=1), rand((2, 19, 4, 16), seed=2), rand((2, 19, 4, 16), seed=3)
    dout = rand(q.shape, seed=4)
    opts = dict(causal=causal, window_size=(6, 3), softcap=2.0)
    out, (dq, dk, dv) = grads_of(lambda q, k, v: chiplet_fa.flash_attn_func(q, k, v, **opts), (q, k, v), dout)

    qkv_out, (dqkv,) = grads_of(lambda qkv: chiplet_fa.flash_attn_qkvpacked_func(qkv, **opts),
                                (torch.stack([q, k, v], dim=2),), dout)
    assert torch.equal(qkv_out, out) and torch.equal(dqkv, torch.stack([dq, dk, dv], dim=2))
    kv_out, (dq2, dkv) = grads_of(lambda q, kv: chiplet_fa.flash_attn_kvpacked_func(q, kv, **opts),
                                  (q, torch.stack([k, v], dim=2)), dout)
    assert torch.equal(kv_out, out) and torch.equal(dq2, dq) and torch.equal(dkv, torch.stack([dk, dv], dim=2))

    cu = cu_seqlens([19, 19])
    flat = [t.flatten(0, 1) for t in (q, k, v)]
    vl_out, (vdq, vdk, vdv) = grads_of(lambda q, k, v: chiplet_fa.flash_attn_varlen_func(q, k, v, cu, cu, 19, 19,
                                                                                         **opts),
                                       flat, dout.flatten(0, 1))
    vqkv_out, (vdqkv,) = grads_of(lambda qkv: chiplet_fa.flash_attn_varlen_qkvpacked_func(qkv, cu, 19, **opts),
                                  (torch.stack(flat, dim=1),), dout.flatten(0, 1))
    assert torch.equal(vqkv_out, vl_out) and torch.equal(vdqkv, torch.stack([vdq, vdk, vdv], dim=1))
    vkv_out, (vdq2, vdkv) = grads_of(
        lambda q, kv: chiplet_fa.flash_attn_varlen_kvpacked_func(q, kv, cu, cu, 19, 19, **opts),
        (flat[0], torch.stack(flat[1:], dim=1)), dout.flatten(0, 1))
    assert torch.equal(vkv_out, vl_out) and torch.equal(vdq2, vdq) and torch.equal(vdkv, torch.stack([vdk, vdv], 1))
    # equal-length packed batch == dense batch (the ops guarantee it; the API must not break it)
    assert torch.equal(vl_out, out.flatten(0, 1)) and torch.equal(vdq, dq.flatten(0, 1))


def test_kvpacked_supports_grouped_query_attention():
    q, kv = rand((1, 11, 6, 8), seed=1), rand((1, 11, 2, 2, 8), seed=2)
    got = chiplet_fa.flash_attn_kvpacked_func(q, kv, causal=True)
    assert torch.equal(got, chiplet_fa.flash_attn_func(q, kv[:, :, 0], kv[:, :, 1], causal=True))


@pytest.mark.parametrize("varlen", [False, True])
def test_gradients_match_reference_under_the_2x_rule(varlen):
    dtype = torch.bfloat16
    q, k, v = rand((2, 33, 4, 16), dtype, 1), rand((2, 33, 2, 16), dtype, 2), rand((2, 33, 2, 16), dtype, 3)
    dout = rand(q.shape, dtype, 4)
    opts = dict(causal=True, window_size=(9, 0), softcap=2.5)
    masks = dict(causal=True, window=(9, 0), softcap=2.5)
    if varlen:
        cu = cu_seqlens([33, 33])
        fn = lambda q, k, v: chiplet_fa.flash_attn_varlen_func(  # noqa: E731
            q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), cu, cu, 33, 33, **opts).view(q.shape)
    else:
        fn = lambda q, k, v: chiplet_fa.flash_attn_func(q, k, v, **opts)  # noqa: E731
    _, got = grads_of(fn, (q, k, v), dout)
    _, ref = grads_of(lambda q, k, v: diff_ref(q, k, v, **masks), [t.double() for t in (q, k, v)], dout.double())
    _, low = grads_of(lambda q, k, v: diff_ref(q, k, v, **masks), (q, k, v), dout)
    for name, g, r, t in zip(("dq", "dk", "dv"), got, ref, low):
        err, budget = (g.double() - r).abs().max().item(), (t.double() - r).abs().max().item()
        assert err <= 2 * budget + 1.6e-2 * max(1.0, r.abs().max().item()), name


@pytest.mark.parametrize("varlen", [False, True])
def test_deterministic_gradients_are_bitwise_reproducible(varlen):
    q, k, v = rand((1, 150, 4, 32), seed=1), rand((1, 150, 2, 32), seed=2), rand((1, 150, 2, 32), seed=3)
    dout = rand(q.shape, seed=4)
    if varlen:
        cu = cu_seqlens([70, 80])
        fn = lambda q, k, v: chiplet_fa.flash_attn_varlen_func(  # noqa: E731
            q[0], k[0], v[0], cu, cu, 80, 80, causal=True, deterministic=True)[None]
    else:
        fn = lambda q, k, v: chiplet_fa.flash_attn_func(q, k, v, causal=True, deterministic=True)  # noqa: E731
    runs = [grads_of(fn, (q, k, v), dout)[1] for _ in range(3)]
    for again in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(runs[0], again))
    want = torch.ops.chiplet_fa.bwd(dout, q, k, v, *torch.ops.chiplet_fa.fwd(q, k, v, causal=True), causal=True,
                                    deterministic=True) if not varlen else None
    if want is not None:
        assert all(torch.equal(a, b) for a, b in zip(runs[0], want))


def test_flash_attn_func_compiles_fullgraph():
    q, k, v = (rand((1, 24, 2, 8), seed=s) for s in range(3))

    def fn(q, k, v):
        return chiplet_fa.flash_attn_func(q, k, v, causal=True, window_size=(5, 0), softcap=3.0) * 2

    torch.testing.assert_close(torch.compile(fn, fullgraph=True)(q, k, v), fn(q, k, v))
