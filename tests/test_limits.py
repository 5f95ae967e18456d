"""The limits of sizes and counts (docs/limits.md): every tile claimed once by the persistent
workers whatever the tiles, multiprocessors and domains; every narrowed argument checked first,
with a ValueError naming it; the emulator refusing launches a GPU refuses; the backward's per-row
passes on batches past a grid's y extent and with a loose max_seqlen_q."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import chiplet_fa
from _bwd_reference import attention_grads_ref
from devices import needs_emulation
from reference import varlen_ref

MAX_XCDS = 4096


# --- the persistent forward's queues (mapping/domain_queues.h) ---

def walk(tiles, sms, domains, turns=()):
    workers, claims = chiplet_fa._C.walk_domain_queues(tiles, sms, domains, list(turns))
    return workers, claims


@settings(max_examples=300, deadline=None)
@given(tiles=st.integers(0, 3000), sms=st.integers(0, 300), domains=st.integers(1, 300),
       turns=st.lists(st.integers(0, 10**6), max_size=400))
def test_every_tile_is_claimed_exactly_once(tiles, sms, domains, turns):
    workers, claims = walk(tiles, sms, domains, turns)
    wids = sorted(wid for _, wid in claims)
    assert wids == list(range(tiles))
    assert (workers >= 1) == (tiles >= 1) and workers <= max(tiles, 0)
    # A worker takes its own domain's ids (w % X) and, with fewer workers than domains, those of
    # the domains w + W, w + 2W, ... that no worker runs on.
    for w, wid in claims:
        d = wid % domains
        assert d % workers == w if workers < domains else d == w % domains, (w, wid)


@pytest.mark.parametrize("tiles, sms, domains", [
    (512, 132, 133),   # q (1, 2048, 16, 128) on 132 SMs with num_xcds=133: tile 132 had no worker
    (100, 8, 64),      # a small part: 8 multiprocessors, 64 modelled domains
    (5, 132, 8),       # fewer tiles than domains
    (1, 1, MAX_XCDS),
])
def test_domains_without_a_worker_of_their_own_are_served(tiles, sms, domains):
    workers, claims = walk(tiles, sms, domains)
    assert sorted(wid for _, wid in claims) == list(range(tiles))


def test_workers_are_a_multiple_of_the_domains_when_more():
    assert walk(10000, 132, 8)[0] == 128
    assert walk(10000, 132, 1)[0] == 132
    assert walk(10000, 132, 133)[0] == 132
    assert walk(10000, 0, 8)[0] == 10000  # without the count, a worker per tile


# --- every narrowed argument checked first ---

def huge(*shape):
    """A float32 tensor of this shape over one row's storage (stride 0 but in the last dimension)."""
    return torch.zeros(shape[-1]).expand(*shape)


@pytest.mark.parametrize("num_heads", [2**31, 2**32 + 1])
def test_query_heads_beyond_int32_are_refused_by_name(num_heads):
    q = huge(1, 1, num_heads, 8)
    k = v = torch.zeros(1, 1, 1, 8)
    with pytest.raises(ValueError, match=r"num_heads of q must be at most 2\^31 - 1"):
        torch.ops.chiplet_fa.fwd(q, k, v, mapping="head_first")
    with pytest.raises(ValueError, match=r"num_heads of q must be at most 2\^31 - 1"):
        torch.ops.chiplet_fa.bwd(q, q, k, v, q, torch.zeros(1, 1, 1).expand(1, num_heads, 1), mapping="head_first")


@pytest.mark.parametrize("num_xcds", [0, -2, MAX_XCDS + 1, 2**31 + 1, 2**32 + 8])
def test_num_xcds_out_of_range_is_refused_by_name(num_xcds):
    q = torch.randn(1, 8, 2, 16)
    with pytest.raises(ValueError, match=rf"num_xcds must be -1 \(detect\) or in 1\.\.{MAX_XCDS}, got {num_xcds}"):
        torch.ops.chiplet_fa.fwd(q, q, q, mapping="swizzled_head_first", num_xcds=num_xcds)
    with pytest.raises(ValueError, match=r"num_xcds must be in 1\.\."):
        chiplet_fa._C.map_workgroups("swizzled_head_first", 1, 2, 2, 1, num_xcds)


def test_num_xcds_at_the_limit_computes_the_right_answer():
    q, k, v = (torch.randn(1, 40, 4, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(s))
               for s in range(3))
    want, _ = torch.ops.chiplet_fa.fwd(q, k, v, mapping="head_first")
    for mapping in ("swizzled_head_first", "auto"):
        got, _ = torch.ops.chiplet_fa.fwd(q, k, v, mapping=mapping, num_xcds=MAX_XCDS)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def test_the_environment_override_has_the_same_limit():
    detect = chiplet_fa._C.locality.detect_xcds_rocm
    assert detect("/nonexistent", 0, str(MAX_XCDS), None, 0, "")[0] == MAX_XCDS
    with pytest.raises(ValueError, match=rf"CHIPLET_FA_NUM_XCDS must be an integer in 1\.\.{MAX_XCDS}"):
        detect("/nonexistent", 0, str(MAX_XCDS + 1), None, 0, "")


@pytest.mark.parametrize("args, message", [
    (dict(batch=2**31), r"batch and num_m_blocks must be in 0\.\.2\^31 - 1"),
    (dict(num_m_blocks=2**32 + 1), r"batch and num_m_blocks must be in 0\.\.2\^31 - 1"),
    (dict(num_q_heads=2**32 + 2, num_kv_heads=2), r"num_q_heads must be at most 2\^31 - 1"),
])
def test_map_workgroups_checks_what_it_narrows(args, message):
    call = dict(batch=1, num_q_heads=2, num_kv_heads=2, num_m_blocks=1, num_xcds=8) | args
    with pytest.raises(ValueError, match=message):
        chiplet_fa._C.map_workgroups("head_first", **call)


def test_packed_batch_beyond_int32_is_refused_by_name():
    q = torch.zeros(4, 2, 8)
    cu = torch.zeros(1, dtype=torch.int32).expand(2**31 + 1)  # 2^31 sequences; refused before it is read
    with pytest.raises(ValueError, match=r"cu_seqlens_q must have batch \+ 1 entries with batch in 0\.\.2\^31 - 1"):
        torch.ops.chiplet_fa.fwd_varlen(q, q, q, cu, cu, 4, 4)


# --- the emulator refuses what a GPU refuses ---

@needs_emulation
@pytest.mark.parametrize("grid, block, lds, message", [
    ((2**31, 1, 1), (64, 1, 1), 0, r"grid \(2147483648, 1, 1\)"),
    ((1, 65536, 1), (64, 1, 1), 0, r"grid \(1, 65536, 1\)"),
    ((1, 1, 65536), (64, 1, 1), 0, r"grid \(1, 1, 65536\)"),
    ((0, 1, 1), (64, 1, 1), 0, r"grid \(0, 1, 1\)"),
    ((1, 1, 1), (1025, 1, 1), 0, r"workgroup \(1025, 1, 1\) of 1025 work-items, at most 1024"),
    ((1, 1, 1), (512, 4, 1), 0, r"workgroup \(512, 4, 1\) of 2048 work-items"),
    ((1, 1, 1), (64, 1, 1), 65537, r"65537 bytes of LDS asked for, a gfx942 workgroup has 65536"),
])
def test_the_emulator_refuses_launches_beyond_the_hardware_limits(grid, block, lds, message):
    with pytest.raises(RuntimeError, match="invalid configuration argument: " + message):
        chiplet_fa._C.emulate.count_workgroups(grid, block, lds)


@needs_emulation
def test_the_emulator_runs_launches_within_the_limits():
    assert chiplet_fa._C.emulate.count_workgroups((3, 5, 1), (64, 1, 1), 65536) == 15
    assert chiplet_fa._C.emulate.count_workgroups((1, 65535, 1), (1, 1, 1)) == 65535


# --- the backward's per-row passes (kernels/bwd_kernel.h), emulated ---

def half_inputs(shape_q, shape_k, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, dout = (torch.randn(shape_q, generator=g).to(torch.float16) for _ in range(2))
    k, v = (torch.randn(shape_k, generator=g).to(torch.float16) for _ in range(2))
    return q, k, v, dout


def assert_grads_close(got, want, floor=2e-3):
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        assert torch.isfinite(g).all(), name
        err = (g.double() - w).abs().max().item()
        assert err <= floor * max(1.0, w.abs().max().item()), f"{name}: error {err:.3g}"


@needs_emulation  # not marked `emulated`: about two minutes, too long for the AddressSanitizer pass
def test_emulated_backward_of_more_sequences_than_a_grid_row_holds():
    # 65,537 sequences of 1-3 queries: the per-row passes once launched a grid row per sequence,
    # which a GPU refuses past 65,535 (the emulator now does too). out and lse from the reference:
    # the backward is under test.
    batch = 65537
    lens = torch.arange(batch) % 3 + 1
    cu = torch.cat([torch.zeros(1, dtype=torch.int64), lens.cumsum(0)]).to(torch.int32)
    total = int(cu[-1])
    q, k, v, dout = half_inputs((total, 1, 8), (total, 1, 8))
    out, lse = varlen_ref(q.double(), k.double(), v.double(), cu, cu)
    out, lse = out.to(q.dtype), lse.float().contiguous()
    grads = torch.ops.chiplet_fa.bwd_varlen(dout, q, k, v, out, lse, cu, cu, 3, 3)
    for b in (0, 1, batch // 2, batch - 1):
        s, e = int(cu[b]), int(cu[b + 1])
        want = attention_grads_ref(*(t[None, s:e].double() for t in (q, k, v, dout)))
        assert_grads_close([g[s:e] for g in grads], [w[0] for w in want])


@needs_emulation
@pytest.mark.emulated
@pytest.mark.parametrize("deterministic", [False, True])
def test_emulated_backward_with_a_loose_max_seqlen_q(deterministic):
    # max_seqlen_q far above the longest sequence: the per-row passes are sized by the rows
    # there are, not by 2^28 rows a sequence.
    cu = torch.tensor([0, 5, 37, 40], dtype=torch.int32)
    q, k, v, dout = half_inputs((40, 2, 16), (40, 1, 16), seed=1)
    loose = 2**28
    out, lse = torch.ops.chiplet_fa.fwd_varlen(q, k, v, cu, cu, loose, 32, causal=True)
    grads = torch.ops.chiplet_fa.bwd_varlen(dout, q, k, v, out, lse, cu, cu, loose, 32, causal=True,
                                            deterministic=deterministic)
    for s, e in zip(cu[:-1].tolist(), cu[1:].tolist()):
        want = attention_grads_ref(*(t[None, s:e].double() for t in (q, k, v, dout)), causal=True)
        assert_grads_close([g[s:e] for g in grads], [w[0] for w in want])
    ref_out = varlen_ref(q.double(), k.double(), v.double(), cu, cu, causal=True)[0]
    assert (out.double() - ref_out).abs().max() < 2e-3
