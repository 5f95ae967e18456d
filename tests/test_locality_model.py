"""The L2 locality model: validation bands against the paper (MI300X) and the H200 anchors,
closed form vs simulator, byte accounting, and the auto policy."""
import io

import pytest
import torch

import chiplet_fa
from chiplet_fa.locality import (Shape, choose_mapping, estimate, explain, preset, simulate,
                                 topology_for_domains)

MI300X, H200 = preset("mi300x"), preset("h200")


def mha(heads, seqlen, **kw):
    return Shape(batch=1, num_q_heads=heads, seqlen_q=seqlen, head_dim=128, **kw)


@pytest.mark.parametrize("heads, seqlen", [(128, 32768)])
def test_mi300x_paper_bands(heads, seqlen):
    # Paper (Fig. 13): naive block-first ~1% at H=128, N>=32K; swizzled head-first 80-97%;
    # naive head-first between the two.
    shape = mha(heads, seqlen)
    hit = {m: simulate(MI300X, shape, m).hit_rate for m in
           ("block_first", "head_first", "swizzled_head_first")}
    assert hit["block_first"] <= 0.05
    assert hit["swizzled_head_first"] >= 0.80
    assert hit["block_first"] < hit["head_first"] <= hit["swizzled_head_first"]


@pytest.mark.parametrize("heads, seqlen", [(8, 2048), (32, 8192), (128, 2048), (128, 8192)])
def test_mi300x_swizzled_head_first_stays_high_across_the_sweep(heads, seqlen):
    shape = mha(heads, seqlen)
    swizzled = simulate(MI300X, shape, "swizzled_head_first").hit_rate
    assert swizzled >= 0.80
    assert simulate(MI300X, shape, "head_first").hit_rate <= swizzled + 1e-9


def test_h200_anchor_within_ten_points():
    # ANCHORS.md, Nsight on the H200, B=1 H=128 N=32K: block-first 0.21%, head-first 98.58%.
    shape = mha(128, 32768)
    assert abs(100 * simulate(H200, shape, "block_first").hit_rate - 0.21) <= 10
    assert abs(100 * simulate(H200, shape, "head_first").hit_rate - 98.58) <= 10
    # Measured DRAM read for block-first was 550.8 GB: every K/V read misses.
    assert simulate(H200, shape, "block_first").dram_read_bytes == pytest.approx(550.8e9, rel=0.05)


@pytest.mark.parametrize("topo", ["mi300x", "mi308x", "h200"])
@pytest.mark.parametrize("shape", [
    mha(64, 4096), mha(16, 16384), Shape(batch=2, num_q_heads=64, num_kv_heads=8, seqlen_q=8192),
    mha(32, 8192, causal=True), Shape(batch=1, num_q_heads=24, seqlen_q=3000, seqlen_k=5000, head_dim=56),
])
@pytest.mark.parametrize("mapping", chiplet_fa.MAPPINGS)
def test_closed_form_agrees_with_simulator(topo, shape, mapping):
    t = preset(topo)
    sim, est = simulate(t, shape, mapping), estimate(t, shape, mapping)
    assert est.kv_read_bytes == sim.kv_read_bytes and est.q_read_bytes == sim.q_read_bytes
    # Near the capacity edge the closed form's union bound is loose: 12 points (report: max gap).
    assert abs(est.hit_rate - sim.hit_rate) <= 0.12, (sim, est)


def test_byte_accounting_and_int64():
    # The paper's largest point reads 2^42 bytes of K/V under block-first: int32 would wrap.
    shape = mha(128, 131072)
    est = estimate(MI300X, shape, "block_first")
    steps, tile = 131072 // 64, 64 * 128 * 2
    assert est.kv_read_bytes == 128 * (131072 // 128) * steps * 2 * tile
    assert est.q_read_bytes == est.o_write_bytes == 128 * 131072 * 128 * 2
    assert est.dram_read_bytes == est.kv_read_bytes - est.kv_hit_bytes + est.q_read_bytes


def test_cache_size_limits():
    shape = mha(16, 4096)
    none = simulate(preset("mi300x", l2_bytes=0), shape, "swizzled_head_first")
    assert none.kv_hit_bytes == 0 and none.dram_read_bytes == none.kv_read_bytes + none.q_read_bytes
    # An L2 holding everything misses each K/V tile once per domain that reads it.
    huge = preset("mi300x", l2_bytes=256 << 20)  # 8192 pairs per domain: no set overflows
    kv_bytes = 16 * 4096 * 128 * 2 * 2
    sim = simulate(huge, shape, "swizzled_head_first")  # 16 heads over 8 XCDs: 2 per XCD
    assert sim.kv_read_bytes - sim.kv_hit_bytes == kv_bytes
    naive = simulate(huge, shape, "head_first")  # every XCD reads every head
    assert naive.kv_read_bytes - naive.kv_hit_bytes == 8 * kv_bytes


def test_swizzle_with_one_xcd_is_the_naive_mapping():
    shape = mha(32, 8192)
    assert simulate(MI300X, shape, "swizzled_head_first", mapping_xcds=1) == \
        simulate(MI300X, shape, "head_first")


def test_causal_reads_about_half():
    full, causal = (estimate(H200, mha(16, 8192, causal=c), "head_first") for c in (False, True))
    assert 0.45 < causal.kv_read_bytes / full.kv_read_bytes < 0.56


def test_progress_callback_reaches_total():
    calls = []
    simulate(H200, mha(8, 4096), "head_first", progress=lambda d, t: calls.append((d, t)))
    assert calls and calls[-1][0] == calls[-1][1] > 0


@pytest.mark.parametrize("bad, match", [
    (dict(topology=preset("h200", wgs_per_cu=0), shape=mha(8, 1024), mapping="head_first"), "wgs_per_cu"),
    (dict(topology=H200, shape=Shape(batch=1, num_q_heads=6, num_kv_heads=4, seqlen_q=128),
          mapping="head_first"), "multiple of num_kv_heads"),
    (dict(topology=H200, shape=mha(8, 1024), mapping="diagonal"), "mapping must be one of"),
])
def test_bad_input_raises_value_error(bad, match):
    with pytest.raises(ValueError, match=match):
        simulate(bad["topology"], bad["shape"], bad["mapping"])


def test_auto_picks_swizzled_on_multi_xcd_and_head_first_on_one_domain():
    shape = mha(128, 32768)
    assert choose_mapping(MI300X, shape)[0] == "swizzled_head_first"
    best, predicted = choose_mapping(H200, shape)
    assert best == "head_first" and set(predicted) == {"block_first", "head_first"}
    assert topology_for_domains(8).name == "mi300x" and topology_for_domains(1).name == "h200"


def test_auto_is_what_the_op_runs():
    # map_workgroups("auto") goes through the same resolve_mapping as the op.
    for xcds, expected in ((8, "swizzled_head_first"), (1, "head_first")):
        rows = chiplet_fa.map_workgroups("auto", 1, 128, 128, 256, xcds, seqlen_k=32768)
        assert torch.equal(rows, chiplet_fa.map_workgroups(expected, 1, 128, 128, 256, xcds))


@pytest.mark.parametrize("make, match", [
    (lambda q: (q.int(), q.int(), q.int()), "q must be float16, bfloat16, float32 or float64"),
    (lambda q: (q, q[..., :8], q), "head dims differ"),
    (lambda q: (q, q[:, :, :3], q[:, :, :3]), r"num_heads of q \(4\) must be a positive multiple"),
    (lambda q: (q[0], q, q), "q must be 4-D"),
])
def test_explain_refuses_what_the_op_refuses(make, match):
    q, k, v = make(torch.randn(1, 64, 4, 16))
    with pytest.raises(ValueError, match=match):
        torch.ops.chiplet_fa.fwd(q, k, v)
    with pytest.raises(ValueError, match="chiplet_fa.explain: " + match):
        explain(q, k, v, file=False)


@pytest.mark.parametrize("kwargs, match", [
    (dict(q=None), "q must be a torch.Tensor"),
    (dict(mapping="diagonal"), "mapping must be one of"),
    (dict(mapping=None), "mapping must be a string"),
    (dict(num_xcds=2.5), "num_xcds must be an integer"),
    (dict(num_xcds=0), "num_xcds must be -1"),
])
def test_explain_checks_its_arguments_as_the_apis_do(kwargs, match):
    q = torch.randn(1, 64, 4, 16)
    args = dict(q=q, k=q, v=q, file=False)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        explain(**args)


def test_explain_prints_the_decision():
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 256, 8, 64, generator=gen)
    k = v = torch.randn(1, 256, 2, 64, generator=gen)
    buf = io.StringIO()
    report = explain(q, k, v, num_xcds=8, file=buf)
    text = buf.getvalue()
    assert report["mapping"] == report["auto_choice"] == "swizzled_head_first"
    assert "<- auto" in text and "swizzled_head_first" in text and "mi300x" in text
    assert explain(q, k, v, file=False)["num_xcds"] == 1  # CPU: one domain
    out = chiplet_fa.attention(q, k, v)  # auto on CPU runs and matches an explicit policy
    assert torch.equal(out, chiplet_fa.attention(q, k, v, mapping=report_cpu_choice(q, k, v)))


def report_cpu_choice(q, k, v):
    return explain(q, k, v, file=False)["auto_choice"]
