"""The L2 locality model on packed (variable-length) batches: the ragged grid the kernels run,
per-sequence K/V steps, equal lengths = the uniform shape, simulator vs closed form, the auto
decision (CPU: exact lengths; GPU: mean length), explain on packed tensors."""
import io
import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import chiplet_fa
from chiplet_fa import _C
from chiplet_fa.locality import Shape, choose_mapping, estimate, explain, preset, simulate

MI300X, MI308X, H200 = preset("mi300x"), preset("mi308x"), preset("h200")


def packed(lens_q, lens_k=None, **kw):
    kw.setdefault("num_q_heads", 8)
    return Shape(batch=len(lens_q), seqlens_q=lens_q, seqlens_k=lens_k, **kw)


@pytest.mark.parametrize("uniform", [
    Shape(batch=3, num_q_heads=16, num_kv_heads=4, seqlen_q=2048),
    Shape(batch=2, num_q_heads=8, seqlen_q=1500, seqlen_k=2600, head_dim=64, causal=True),
])
@pytest.mark.parametrize("topo", [MI300X, H200])
def test_equal_lengths_predict_the_uniform_shape(uniform, topo):
    kw = uniform.kwargs()
    ragged = Shape(batch=uniform.batch, num_q_heads=uniform.num_q_heads, num_kv_heads=kw["num_kv_heads"],
                   head_dim=uniform.head_dim, causal=uniform.causal,
                   seqlens_q=[kw["seqlen_q"]] * uniform.batch, seqlens_k=[kw["seqlen_k"]] * uniform.batch)
    for m in chiplet_fa.MAPPINGS:
        assert simulate(topo, ragged, m) == simulate(topo, uniform, m), m
        assert estimate(topo, ragged, m) == estimate(topo, uniform, m), m
    assert choose_mapping(topo, ragged) == choose_mapping(topo, uniform)


RAGGED = [
    packed([4096, 512, 0, 3000], num_q_heads=32),                                  # empty sequence
    packed([0, 4096, 300, 0, 2048], num_q_heads=16, num_kv_heads=4),                # GQA, two empty
    packed([1024, 4000, 0, 2500], [2048, 4000, 100, 6000], num_q_heads=16, num_kv_heads=2),  # N_k != N_q
    packed([6000, 128, 128, 128, 2000], num_q_heads=16, head_dim=64, causal=True),  # causal, mixed
    packed([3000, 700, 1800], [3500, 700, 900], num_q_heads=8, causal=True),        # causal, N_k < N_q
]


@pytest.mark.parametrize("topo", [MI300X, MI308X, H200], ids=["mi300x", "mi308x", "h200"])
@pytest.mark.parametrize("shape", RAGGED, ids=range(len(RAGGED)))
def test_closed_form_agrees_with_simulator_on_ragged_shapes(topo, shape):
    # docs/l2_model.md's tolerance: about 1 point, up to ~13 for block-first near the capacity edge (12.2
    # here: shape 2 on mi300x; its uniform analogue B=4 N=2500/3000 is 9 points off).
    for m in chiplet_fa.MAPPINGS:
        sim, est = simulate(topo, shape, m), estimate(topo, shape, m)
        assert (est.kv_read_bytes, est.q_read_bytes) == (sim.kv_read_bytes, sim.q_read_bytes)
        assert abs(est.hit_rate - sim.hit_rate) <= (0.13 if "block_first" in m else 0.03), (m, sim, est)


def tile_steps(n_q, n_k, m, causal, block_m=128, block_n=64):
    keys = max(0, min(n_k, min(n_q, (m + 1) * block_m) + n_k - n_q)) if causal else n_k
    return -(-keys // block_n)


@settings(max_examples=25, deadline=None)
@given(lens=st.lists(st.tuples(st.integers(0, 700), st.integers(0, 700)), min_size=1, max_size=5),
       kv_heads=st.sampled_from([1, 2]), group=st.sampled_from([1, 3]), causal=st.booleans())
def test_byte_accounting_follows_each_sequence(lens, kv_heads, group, causal):
    lens_q, lens_k = [n for n, _ in lens], [n for _, n in lens]
    shape = packed(lens_q, lens_k, num_q_heads=kv_heads * group, num_kv_heads=kv_heads, head_dim=64,
                   causal=causal)
    heads = kv_heads * group
    steps = sum(tile_steps(nq, nk, m, causal) for nq, nk in lens for m in range(-(-nq // 128)))
    row = 64 * 2  # D * elem: one 128-byte line
    for fn in (simulate, estimate):
        p = fn(MI300X, shape, "swizzled_head_first")
        assert p.kv_read_bytes == heads * steps * 2 * 64 * row
        assert p.q_read_bytes == p.o_write_bytes == heads * sum(lens_q) * row


def test_the_model_walks_the_kernels_ragged_grid():
    # An L2 holding everything misses each (ACC, K/V step) once per domain that reads it: count
    # them on the kernels' own mapping of the ragged grid, ACC = (sequence, KV head).
    lens, heads, kv_heads = [700, 0, 1300, 200, 900], 6, 2
    shape = packed(lens, num_q_heads=heads, num_kv_heads=kv_heads, causal=True)
    huge = preset("mi300x", l2_bytes=256 << 20)  # 8192 pairs per domain for a few hundred touched
    pair = 2 * 64 * 256  # K and V tile of one step, D=128 bf16
    for policy in chiplet_fa.MAPPINGS:
        tiles = chiplet_fa.map_workgroups(policy, len(lens), heads, kv_heads, max(-(-n // 128) for n in lens), 8,
                                          causal=True, blocks_per_sequence=[-(-n // 128) for n in lens]).tolist()
        touched = set()
        for wid, (b, h, m) in enumerate(tiles):
            acc = (b, h // (heads // kv_heads))
            touched.update((wid % 8, acc, j) for j in range(tile_steps(lens[b], lens[b], m, True)))
        sim = simulate(huge, shape, policy)
        assert sim.kv_read_bytes - sim.kv_hit_bytes == len(touched) * pair, policy


def test_choose_mapping_keys_on_the_lengths():
    # One batch, one longest sequence, one mean: only the lengths differ, so must the predictions.
    a = packed([4096, 2048, 2048], num_q_heads=16)
    b = packed([4096, 4096, 0], num_q_heads=16)
    _, pa = choose_mapping(MI300X, a)
    _, pb = choose_mapping(MI300X, b)
    assert pa != pb
    assert pa["swizzled_head_first"] == estimate(MI300X, a, "swizzled_head_first")
    assert pb["swizzled_head_first"] == estimate(MI300X, b, "swizzled_head_first")
    # seqlen_q/seqlen_k are bounds (max_seqlen) and change nothing.
    loose = Shape(batch=3, num_q_heads=16, seqlen_q=9000, seqlen_k=9000, seqlens_q=[4096, 2048, 2048])
    assert choose_mapping(MI300X, loose) == choose_mapping(MI300X, a)


@pytest.mark.parametrize("kwargs, match", [
    (dict(seqlens_q=[1, 2], seqlens_k=[1, 2, 3]), "seqlens_q and seqlens_k must both have batch"),
    (dict(seqlens_q=[1, 2], seqlens_k=[]), "seqlens_q and seqlens_k must both have batch"),
    (dict(seqlens_q=[1, -5], seqlens_k=[1, 2]), r"seqlens_q\[1\] = -5"),
    (dict(seqlens_q=[1, 2], seqlens_k=[1, 900]), r"seqlens_k\[1\] = 900 must be in 0..seqlen_k \(512"),
])
def test_validate_names_the_bad_field(kwargs, match):
    with pytest.raises(ValueError, match=match):
        _C.locality.estimate(MI300X, batch=2, num_q_heads=4, num_kv_heads=4, seqlen_q=512, seqlen_k=512,
                             head_dim=64, **kwargs)


def test_python_shape_checks():
    with pytest.raises(ValueError, match="seqlens_q has 2 entries for batch 3"):
        Shape(batch=3, num_q_heads=4, seqlens_q=[1, 2])
    with pytest.raises(ValueError, match="seqlens_k needs seqlens_q"):
        Shape(batch=1, num_q_heads=4, seqlen_q=8, seqlens_k=[8])
    with pytest.raises(ValueError, match="give seqlen_q"):
        Shape(batch=1, num_q_heads=4)
    s = packed([300, 0, 40])
    assert s.seqlens_q == (300, 0, 40) and s.kwargs()["seqlen_q"] == 300 and s.kwargs()["seqlens_k"] == [300, 0, 40]


def test_auto_lengths_is_the_ops_rule():
    # Host cu_seqlens (a CPU op): the exact lengths; none (a GPU op): batch sequences of the mean
    # length, rounded up; offsets that are not a packing: the mean too.
    cu_q, cu_k = [0, 100, 100, 300], [0, 200, 250, 700]
    assert _C.locality.auto_lengths(3, 200, 450, 300, 700, cu_q, cu_k) == (200, 450, [100, 0, 200], [200, 50, 450])
    assert _C.locality.auto_lengths(3, 200, 450, 300, 700) == (100, 234, [], [])
    assert _C.locality.auto_lengths(3, 150, 450, 300, 700, cu_q, cu_k)[2] == []  # 200 > max_seqlen_q
    assert _C.locality.auto_lengths(3, 200, 450, 300, 700, [0, 200, 100, 300], cu_k)[2] == []


def packed_qkv(lens_q, lens_k, heads=8, kv_heads=2, dim=64):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(sum(lens_q), heads, dim, generator=gen)
    k, v = (torch.randn(sum(lens_k), kv_heads, dim, generator=gen) for _ in range(2))
    cu = [torch.tensor([0] + list(itertools.accumulate(n)), dtype=torch.int32) for n in (lens_q, lens_k)]
    return q, k, v, cu[0], cu[1]


def test_explain_on_packed_tensors():
    lens_q, lens_k = [100, 0, 200], [200, 50, 450]
    q, k, v, cu_q, cu_k = packed_qkv(lens_q, lens_k)
    buf = io.StringIO()
    r = explain(q, k, v, causal=True, num_xcds=8, file=buf, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    text = buf.getvalue()
    assert r["shape"].seqlens_q == (100, 0, 200) and r["shape"].seqlens_k == (200, 50, 450)
    assert r["auto_shape"] is r["shape"] and r["auto_choice"] == r["exact_choice"] == r["mapping"]
    assert "packed B=3 N_q=100,0,200 N_k=200,50,450" in text and "<- auto" in text
    assert r["predicted"] == choose_mapping(preset("mi300x"), r["shape"])[1]
    # The op runs on the same lengths: auto on the CPU with 8 XCDs matches the explicit policy.
    args = (q, k, v, cu_q, cu_k, 200, 450, None, True)
    out, _ = torch.ops.chiplet_fa.fwd_varlen(*args, mapping="auto", num_xcds=8)
    ref, _ = torch.ops.chiplet_fa.fwd_varlen(*args, mapping=r["auto_choice"], num_xcds=8)
    assert torch.equal(out, ref)


def test_explain_packed_off_the_cpu_reports_the_mean_length_decision():
    # Any device but the CPU: the op cannot read cu_seqlens without a device-to-host copy, so its
    # auto decision sees batch sequences of the mean length; explain (a diagnostic) reads them.
    q, k, v, cu_q, cu_k = packed_qkv([100, 0, 200], [200, 50, 450])
    buf = io.StringIO()
    r = explain(q.to("meta"), k.to("meta"), v.to("meta"), num_xcds=8, file=buf, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                max_seqlen_q=256, max_seqlen_k=512)
    assert r["shape"].seqlens_q == (100, 0, 200) and r["shape"].seqlen_q == 256
    assert not r["auto_shape"].packed and r["auto_shape"].kwargs()["seqlen_q"] == 100
    assert r["auto_shape"].kwargs()["seqlen_k"] == 234
    assert r["auto_choice"] == choose_mapping(preset("mi300x"), r["auto_shape"])[0]
    assert "mean length (N_q=100 N_k=234)" in buf.getvalue()


@pytest.mark.parametrize("kwargs, match", [
    (dict(cu_seqlens_q=[0, 100, 300]), "needs both cu_seqlens_q and cu_seqlens_k"),
    (dict(cu_seqlens_q=[0, 100, 299], cu_seqlens_k=[0, 200, 700]), "must start at 0, be non-decreasing and end at 300"),
    (dict(cu_seqlens_q=[0, 100, 300], cu_seqlens_k=[0, 700]), "one length"),
    (dict(cu_seqlens_q=[0, 100, 300], cu_seqlens_k=[0, 200, 700], max_seqlen_k=400), "max_seqlen_k = 400 is shorter"),
])
def test_explain_rejects_bad_packing(kwargs, match):
    q, k, v, _, _ = packed_qkv([100, 200], [200, 500])
    with pytest.raises(ValueError, match=match):
        explain(q, k, v, file=False, **kwargs)
    with pytest.raises(ValueError, match="4-D"):
        explain(q, k, v, file=False)
