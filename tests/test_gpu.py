"""GPU-only behaviour: unsupported dtypes, poisoned memory, CUDA graphs, streams, 64-bit offsets."""
import pytest
import torch

import chiplet_fa
from devices import device_kernels, needs_cuda, skip_unless_built
from reference import assert_close_to_ref, attention_ref, fully_masked_rows

pytestmark = [pytest.mark.gpu, needs_cuda]
FLOORS = {torch.float16: 1e-3, torch.bfloat16: 8e-3, torch.float32: 1e-5, torch.float64: 1e-10}


def randn(*shape, dtype=torch.bfloat16, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(shape, device="cuda", dtype=dtype, generator=gen)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_wide_dtypes_either_match_or_are_refused_by_name(dtype):
    q, k, v = (randn(2, 150, 4, 64, dtype=dtype, seed=s) for s in range(3))
    try:
        out, lse = torch.ops.chiplet_fa.fwd(q, k, v, causal=True)
    except (RuntimeError, ValueError) as err:
        assert "dtype" in str(err) or str(dtype).split(".")[-1] in str(err), str(err)
        return
    out_ref, lse_ref = attention_ref(q, k, v, causal=True)
    out_pt, lse_pt = attention_ref(q, k, v, causal=True, dtype=dtype)
    assert_close_to_ref(out, out_ref, out_pt, FLOORS[dtype], "out")
    assert_close_to_ref(lse, lse_ref, lse_pt.float(), 1e-5, "lse")


def poison_allocator(*tensors_like):
    """Fill freshly freed blocks of the outputs' sizes with NaN: the caching allocator hands them
    to the op's next allocations, so an element the kernel never writes stays NaN."""
    for shape, dtype in tensors_like:
        torch.full(shape, float("nan"), device="cuda", dtype=dtype)


@pytest.mark.parametrize("seqlen_q, seqlen_k, causal", [
    (300, 300, False), (300, 300, True), (300, 100, True), (129, 0, False), (1, 257, True),
])
@pytest.mark.parametrize("head_dim", [64, 128, 20])
def test_every_output_element_is_written(seqlen_q, seqlen_k, causal, head_dim):
    skip_unless_built(head_dim)
    batch, num_q_heads, num_kv_heads = 2, 6, 2
    q = randn(batch, seqlen_q, num_q_heads, head_dim, dtype=torch.float16, seed=1)
    k = randn(batch, seqlen_k, num_kv_heads, head_dim, dtype=torch.float16, seed=2)
    v = randn(batch, seqlen_k, num_kv_heads, head_dim, dtype=torch.float16, seed=3)
    poison_allocator((q.shape, q.dtype), ((batch, num_q_heads, seqlen_q), torch.float32))
    out, lse = torch.ops.chiplet_fa.fwd(q, k, v, causal=causal)
    torch.cuda.synchronize()
    masked = fully_masked_rows(seqlen_q, seqlen_k, causal).cuda()
    assert torch.isfinite(out).all(), "out has NaN/inf: some element was never written"
    assert (out[:, masked] == 0).all()
    assert (lse[:, :, masked] == float("-inf")).all()
    assert torch.isfinite(lse[:, :, ~masked]).all()


def captured(fn):
    """fn captured in a CUDA graph after a warm-up outside it (first-call setup): (graph, fn's
    outputs, which each replay rewrites)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = fn()
    return graph, outputs


@pytest.mark.parametrize("head_dim", [64, 128])
def test_explain_models_the_tile_rows_the_kernel_runs(head_dim):
    # The sm90 forward's tiles are 192 rows (three consumer warpgroups) where the instantiation
    # that runs is D = 64, 128 otherwise, as on mma_sync and cdna3 up to D = 128.
    skip_unless_built(head_dim)
    family, kinds = device_kernels()
    runs = min(d for d in kinds["fwd"]["head_dims"] if d >= head_dim)
    q = randn(1, 300, 2, head_dim)
    rows = 192 if family == "sm90" and runs <= 64 else 128
    assert chiplet_fa.explain(q, q, q, file=False)["shape"].block_m == rows


def test_cuda_graph_capture_and_replay():
    q, k, v = (randn(2, 200, 8, 64, dtype=torch.float16, seed=s) for s in range(3))
    graph, (out, lse) = captured(lambda: torch.ops.chiplet_fa.fwd(q, k, v, causal=True))
    for seed in (10, 20):
        for i, t in enumerate((q, k, v)):
            t.copy_(randn(*t.shape, dtype=t.dtype, seed=seed + i))
        graph.replay()
        want_out, want_lse = torch.ops.chiplet_fa.fwd(q, k, v, causal=True)
        assert torch.equal(out, want_out) and torch.equal(lse, want_lse)


@pytest.mark.parametrize("deterministic", [False, True])
def test_cuda_graph_captures_the_backward(deterministic):
    # Training loops and the benchmarks capture the backward too: its workspaces (dQ accumulator,
    # turn counters) must be cleared inside the graph, or the second replay adds to the first.
    skip_unless_built(128)
    shape = (2, 300, 8, 128)
    q, k, v, dout = (randn(*shape, seed=s) for s in range(4))
    out, lse = torch.ops.chiplet_fa.fwd(q, k, v, causal=True)
    bwd = lambda: torch.ops.chiplet_fa.bwd(dout, q, k, v, out, lse, causal=True,  # noqa: E731
                                           deterministic=deterministic)
    graph, grads = captured(bwd)
    for seed in (10, 20):
        for i, t in enumerate((q, k, v, dout)):
            t.copy_(randn(*shape, seed=seed + i))
        new_out, new_lse = torch.ops.chiplet_fa.fwd(q, k, v, causal=True)
        out.copy_(new_out)
        lse.copy_(new_lse)
        graph.replay()
        for name, got, want in zip(("dq", "dk", "dv"), grads, bwd()):
            if deterministic:
                assert torch.equal(got, want), name
            else:  # atomic dQ adds in any order: equal to rounding
                torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2, msg=name)


def test_runs_on_the_current_stream():
    # On a non-blocking side stream, inputs are written after a long sleep; a kernel launched
    # on any other stream would read them before they are ready.
    skip_unless_built(128)
    shape = (1, 256, 8, 128)
    q, k, v = (torch.zeros(shape, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    sources = [randn(*shape, seed=s) for s in range(3)]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)
        for dst, src in zip((q, k, v), sources):
            dst.copy_(src)
        out, lse = torch.ops.chiplet_fa.fwd(q, k, v)
    side.synchronize()
    out_ref, lse_ref = attention_ref(*sources)
    out_pt, lse_pt = attention_ref(*sources, dtype=torch.bfloat16)
    assert_close_to_ref(out, out_ref, out_pt, FLOORS[torch.bfloat16], "out")


def check_rows(q, k, v, out, lse, rows):
    """Compare chosen (batch, row, q_head) outputs with a reference over only those rows."""
    group = q.shape[2] // k.shape[2]
    for b, n, h in rows:
        qs = q[b:b + 1, n:n + 1, h:h + 1]
        ks, vs = (t[b:b + 1, :, h // group:h // group + 1] for t in (k, v))
        out_ref, lse_ref = attention_ref(qs, ks, vs)
        out_pt, lse_pt = attention_ref(qs, ks, vs, dtype=q.dtype)
        where = f"row (batch {b}, n {n}, head {h})"
        assert_close_to_ref(out[b:b + 1, n:n + 1, h:h + 1], out_ref, out_pt, FLOORS[q.dtype], where)
        assert_close_to_ref(lse[b:b + 1, h:h + 1, n:n + 1], lse_ref, lse_pt.float(), 1e-3, where)


BIG = 2**31


@pytest.mark.slow
@pytest.mark.parametrize("name, batch, seqlen_q, seqlen_k, num_q_heads, num_kv_heads", [
    ("batch offset", 257, 4096, 4096, 16, 16),        # b * batch_stride > 2^31 in q, k, v, out
    ("key offset", 1, 128, 2**18 + 100, 64, 64),      # n_k * row_stride > 2^31 in k, v
    ("query offset", 1, 2**18 + 100, 64, 64, 8),      # n_q * row_stride > 2^31 in q, out
])
def test_offsets_beyond_int32(name, batch, seqlen_q, seqlen_k, num_q_heads, num_kv_heads):
    head_dim = 128
    skip_unless_built(head_dim)
    assert max(batch * seqlen_q * num_q_heads, batch * seqlen_k * num_kv_heads) * head_dim > BIG
    q = randn(batch, seqlen_q, num_q_heads, head_dim, seed=1)
    k = randn(batch, seqlen_k, num_kv_heads, head_dim, seed=2)
    v = randn(batch, seqlen_k, num_kv_heads, head_dim, seed=3)
    out, lse = torch.ops.chiplet_fa.fwd(q, k, v)
    last = (batch - 1, seqlen_q - 1, num_q_heads - 1)
    rows = [(0, 0, 0), last, (batch // 2, seqlen_q // 2, num_q_heads // 2), (batch - 1, 0, 1)]
    check_rows(q, k, v, out, lse, rows)
