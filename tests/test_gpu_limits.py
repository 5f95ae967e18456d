"""The limits on a GPU (docs/limits.md): more L2 domains than persistent workers, batches of more
sequences than a grid's y extent, a loose max_seqlen_q, and backward and packed offsets past 2^31
elements. Poisoned memory: an element no kernel writes reads NaN."""
import pytest
import torch

from _bwd_reference import attention_grads_ref
from devices import needs_cuda, skip_unless_built
from reference import assert_close_to_ref, attention_ref
from test_gpu import FLOORS, poison_allocator, randn

pytestmark = [pytest.mark.gpu, needs_cuda]
BIG = 2**31
GRAD_FLOOR = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def assert_grads_two_x(got, q, k, v, dout, causal=False, what=""):
    """flash-attention's rule per gradient against fp64, on (slices of) the inputs."""
    ref = attention_grads_ref(q, k, v, dout, causal, dtype=torch.float64)
    same = attention_grads_ref(q, k, v, dout, causal)
    for name, g, r, t in zip(("dq", "dk", "dv"), got, ref, same):
        floor = GRAD_FLOOR[q.dtype] * max(1.0, r.abs().max().item())
        assert_close_to_ref(g, r, t, floor, f"{what} {name}")


@pytest.mark.parametrize("num_xcds", [133, 1000, 4096])
def test_more_domains_than_workers_computes_every_tile(num_xcds):
    # swizzled mappings run the persistent sm90 forward with a queue per domain; with more domains
    # than multiprocessors, the domains no worker runs on are served by the others.
    skip_unless_built(128)
    q, k, v = (randn(1, 2048, 16, 128, seed=s) for s in range(3))
    poison_allocator((q.shape, q.dtype), ((1, 16, 2048), torch.float32))
    out, lse = torch.ops.chiplet_fa.fwd(q, k, v, mapping="swizzled_head_first", num_xcds=num_xcds)
    out_ref, lse_ref = attention_ref(q, k, v)
    out_pt, lse_pt = attention_ref(q, k, v, dtype=torch.bfloat16)
    assert_close_to_ref(out, out_ref, out_pt, FLOORS[torch.bfloat16], "out")
    assert_close_to_ref(lse, lse_ref, lse_pt.float(), 1e-3, "lse")


@pytest.mark.parametrize("deterministic", [False, True])
def test_backward_of_a_batch_past_a_grid_rows_extent(deterministic):
    # B = 70,000: the per-row passes once put the batch in gridDim.y (at most 65,535).
    skip_unless_built(64)
    batch = 70000
    q, dout = (randn(batch, 16, 2, 64, seed=s) for s in (1, 4))
    k, v = (randn(batch, 16, 2, 64, seed=s) for s in (2, 3))
    out, lse = torch.ops.chiplet_fa.fwd(q, k, v, causal=True)
    poison_allocator((q.shape, torch.float32), (q.shape, q.dtype), (k.shape, k.dtype))
    grads = torch.ops.chiplet_fa.bwd(dout, q, k, v, out, lse, causal=True, deterministic=deterministic)
    torch.cuda.synchronize()
    for g in grads:
        assert torch.isfinite(g).all()
    for b in (0, 1, batch // 2, 65535, 65536, batch - 1):
        sl = [t[b:b + 1] for t in (q, k, v, dout)]
        assert_grads_two_x([g[b:b + 1] for g in grads], *sl, causal=True, what=f"batch {b}")


def packed(lens_q, lens_k, heads_q, heads_kv, head_dim, seed=0):
    cu_q = torch.tensor([0] + lens_q, device="cuda").cumsum(0).to(torch.int32)
    cu_k = torch.tensor([0] + lens_k, device="cuda").cumsum(0).to(torch.int32)
    q, dout = (randn(int(cu_q[-1]), heads_q, head_dim, seed=seed + s) for s in (1, 4))
    k, v = (randn(int(cu_k[-1]), heads_kv, head_dim, seed=seed + s) for s in (2, 3))
    return q, k, v, dout, cu_q, cu_k


def check_sequences(grads, q, k, v, dout, cu_q, cu_k, which, causal=False):
    for b in which:
        sq, eq, sk, ek = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), int(cu_k[b + 1])
        sl = [t[None, s:e] for t, s, e in ((q, sq, eq), (k, sk, ek), (v, sk, ek), (dout, sq, eq))]
        got = [g[None, s:e] for g, s, e in zip(grads, (sq, sk, sk), (eq, ek, ek))]
        assert_grads_two_x(got, *sl, causal=causal, what=f"sequence {b}")


@pytest.mark.parametrize("deterministic", [False, True])
def test_varlen_backward_of_65536_sequences(deterministic):
    skip_unless_built(64)
    lens = [(b * 7) % 13 + 1 for b in range(65536)]
    q, k, v, dout, cu_q, cu_k = packed(lens, lens, 4, 2, 64)
    out, lse = torch.ops.chiplet_fa.fwd_varlen(q, k, v, cu_q, cu_k, 13, 13, causal=True)
    grads = torch.ops.chiplet_fa.bwd_varlen(dout, q, k, v, out, lse, cu_q, cu_k, 13, 13, causal=True,
                                            deterministic=deterministic)
    check_sequences(grads, q, k, v, dout, cu_q, cu_k, (0, 1, 40000, 65534, 65535), causal=True)


@pytest.mark.parametrize("deterministic", [False, True])
def test_varlen_backward_with_a_loose_max_seqlen_q(deterministic):
    # max_seqlen_q = 2^28 with 32 heads once sized the per-row passes for 2^28 rows of every
    # sequence (2^31 blocks and more: a launch error, or a silent crawl over empty blocks).
    skip_unless_built(64)
    lens_q, lens_k = [100, 1, 300, 77], [120, 50, 300, 77]
    q, k, v, dout, cu_q, cu_k = packed(lens_q, lens_k, 32, 8, 64, seed=5)
    loose = 2**28
    out, lse = torch.ops.chiplet_fa.fwd_varlen(q, k, v, cu_q, cu_k, loose, loose)
    grads = torch.ops.chiplet_fa.bwd_varlen(dout, q, k, v, out, lse, cu_q, cu_k, loose, loose,
                                            deterministic=deterministic)
    check_sequences(grads, q, k, v, dout, cu_q, cu_k, range(len(lens_q)))


# --- offsets past 2^31 elements in the backward and in packed batches ---

@pytest.mark.slow
@pytest.mark.parametrize("name, batch, seqlen_q, seqlen_k, num_q_heads, num_kv_heads, check", [
    ("batch offset", 1025, 1024, 1024, 16, 16, "batch"),    # b * batch_stride > 2^31 in every tensor
    ("key offset", 1, 128, 2**18 + 100, 64, 64, "head"),    # n_k * row_stride > 2^31 in k, v, dk, dv
    ("query offset", 1, 2**18 + 100, 64, 64, 8, "group"),   # n_q * row_stride > 2^31 in q, dout, dq
])
def test_backward_offsets_beyond_int32(name, batch, seqlen_q, seqlen_k, num_q_heads, num_kv_heads, check):
    head_dim = 128
    skip_unless_built(head_dim)
    assert max(batch * seqlen_q * num_q_heads, batch * seqlen_k * num_kv_heads) * head_dim > BIG
    q, dout = (randn(batch, seqlen_q, num_q_heads, head_dim, seed=s) for s in (1, 4))
    k, v = (randn(batch, seqlen_k, num_kv_heads, head_dim, seed=s) for s in (2, 3))
    out, lse = torch.ops.chiplet_fa.fwd(q, k, v)
    grads = torch.ops.chiplet_fa.bwd(dout, q, k, v, out, lse)
    del out, lse
    group = num_q_heads // num_kv_heads
    if check == "batch":  # whole sequences: the first, the middle and the last
        for b in (0, batch // 2, batch - 1):
            assert_grads_two_x([g[b:b + 1] for g in grads], *(t[b:b + 1] for t in (q, k, v, dout)), what=name)
    else:  # a KV head with its query heads: the first and the last
        for kv in (0, num_kv_heads - 1):
            hq, hk = slice(kv * group, (kv + 1) * group), slice(kv, kv + 1)
            sl = [q[:, :, hq], k[:, :, hk], v[:, :, hk], dout[:, :, hq]]
            assert_grads_two_x([grads[0][:, :, hq], grads[1][:, :, hk], grads[2][:, :, hk]], *sl, what=name)


@pytest.mark.slow
def test_varlen_offsets_beyond_int32():
    # The last sequence starts past 2^31 elements of q, k and v; forward and backward.
    head_dim, heads = 128, 64
    lens = [1000, 2**18, 700]
    q, k, v, dout, cu_q, cu_k = packed(lens, lens, heads, 8, head_dim, seed=3)
    assert int(cu_q[-2]) * heads * head_dim > BIG
    out, lse = torch.ops.chiplet_fa.fwd_varlen(q, k, v, cu_q, cu_k, max(lens), max(lens), causal=True)
    grads = torch.ops.chiplet_fa.bwd_varlen(dout, q, k, v, out, lse, cu_q, cu_k, max(lens), max(lens), causal=True)
    for b in (0, 2):
        s, e = int(cu_q[b]), int(cu_q[b + 1])
        sl = [t[None, s:e] for t in (q, k, v, dout)]
        out_ref, lse_ref = attention_ref(*sl[:3], causal=True)
        out_pt, lse_pt = attention_ref(*sl[:3], causal=True, dtype=q.dtype)
        assert_close_to_ref(out[None, s:e], out_ref, out_pt, 8e-3, f"sequence {b} out")
        assert_close_to_ref(lse[None, :, s:e], lse_ref, lse_pt.float(), 1e-3, f"sequence {b} lse")
        assert_grads_two_x([g[None, s:e] for g in grads], *sl, causal=True, what=f"sequence {b}")
