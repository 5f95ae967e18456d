"""chiplet_fa.flash_attn_with_kvcache / torch.ops.chiplet_fa.fwd_kvcache against an fp64 reference:
contiguous and paged caches, random block tables, appends with and without rotary embedding, GQA
ratios, key splits, masks. Cache rows a call must not read hold NaN; rows it must not write are
compared bit for bit."""
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import chiplet_fa
from devices import DEVICES_AND_EMULATOR, torch_device
from reference import assert_close_to_ref, attention_ref

KERNEL_DTYPES = (torch.float16, torch.bfloat16)


def dtypes_for(device):
    return (torch.float32, torch.float64) if device == "cpu" else KERNEL_DTYPES


def rotate_ref(x, cos, sin, interleaved):
    """x (N, H, D) rotated by cos/sin rows (N, R/2), in float64."""
    x = x.double()
    c, s = cos.double()[:, None], sin.double()[:, None]
    half = cos.shape[1]
    head, tail = x[..., :2 * half], x[..., 2 * half:]
    if interleaved:
        x1, x2 = head[..., 0::2], head[..., 1::2]
        turned = torch.stack((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).flatten(-2)
    else:
        x1, x2 = head[..., :half], head[..., half:]
        turned = torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)
    return torch.cat((turned, tail), dim=-1)


class Case:
    """One decoding call's inputs, drawn from `data`, and where each sequence's keys live."""

    def __init__(self, data, device, dtype, paged):
        draw = data.draw
        self.device, self.dtype, self.paged = torch_device(device), dtype, paged
        self.batch = draw(st.integers(1, 3), label="batch")
        self.seqlen_q = draw(st.integers(1, 4), label="seqlen_q")
        self.kv_heads = draw(st.integers(1, 2), label="kv_heads")
        self.heads = self.kv_heads * draw(st.sampled_from([1, 2, 4, 8]), label="group")
        self.head_dim = draw(st.sampled_from([16, 32, 64, 128] if device != "cpu" else [8, 20, 64]), label="d")
        self.seqlen_new = draw(st.integers(0, 3), label="seqlen_new")
        self.rotary = self.seqlen_new > 0 and draw(st.booleans(), label="rotary")
        if paged:
            self.page = draw(st.sampled_from([1, 4, 16, 64]), label="page_size")
            fewest = max(1, -(-self.seqlen_new // self.page))  # room for the appends
            self.pages_per_seq = draw(st.integers(fewest, max(fewest, 200 // self.page)), label="pages_per_seq")
            self.capacity = self.page * self.pages_per_seq
        else:
            self.capacity = draw(st.integers(max(1, self.seqlen_new), 200), label="cache_len")
        self.cached = [draw(st.integers(0, self.capacity - self.seqlen_new)) for _ in range(self.batch)]
        self.leftpad = None if paged or not draw(st.booleans(), label="leftpad") else \
            [draw(st.integers(0, c)) for c in self.cached]
        self.causal = draw(st.booleans(), label="causal")
        self.window = draw(st.sampled_from([(-1, -1), (-1, -1), (8, 0), (40, 3)]), label="window")
        self.softcap = draw(st.sampled_from([0.0, 0.0, 5.0]), label="softcap")
        self.alibi = draw(st.booleans(), label="alibi")
        self.num_splits = draw(st.sampled_from([0, 1, 2, 5]), label="num_splits")
        self.interleaved = draw(st.booleans(), label="interleaved")
        self.q_transposed = draw(st.booleans(), label="q_transposed")
        self._tensors(draw)

    def _tensors(self, draw):
        gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31)))
        opts = dict(dtype=self.dtype, device=self.device)
        rnd = lambda *shape: torch.randn(*shape, generator=gen).to(**opts)  # noqa: E731
        b, h, hk, d = self.batch, self.heads, self.kv_heads, self.head_dim
        # transformers hands q over as a (B, H, N_q, D) tensor transposed: strides other than dense
        self.q = rnd(b, h, self.seqlen_q, d).transpose(1, 2) if self.q_transposed else rnd(b, self.seqlen_q, h, d)
        self.k = rnd(b, self.seqlen_new, hk, d) if self.seqlen_new else None
        self.v = rnd(b, self.seqlen_new, hk, d) if self.seqlen_new else None
        if self.paged:
            num_pages = b * self.pages_per_seq + 3
            self.block_table = torch.randperm(num_pages, generator=gen)[:b * self.pages_per_seq].reshape(
                b, self.pages_per_seq).to(torch.int32).to(self.device)
            shape = (num_pages, self.page, hk, d)
            self.batch_idx = None
        else:
            self.block_table = None
            entries = b + 1
            self.batch_idx = torch.randperm(entries, generator=gen)[:b].to(torch.int32).to(self.device)
            shape = (entries, self.capacity, hk, d)
        # NaN everywhere but the keys each sequence attends to: a read outside them shows.
        self.k_cache = torch.full(shape, math.nan, **opts)
        self.v_cache = torch.full(shape, math.nan, **opts)
        for s in range(b):
            keys = range(self.begin(s), self.cached[s])
            for key in keys:
                page, row = self.where(s, key)
                self.k_cache[page, row] = rnd(hk, d)
                self.v_cache[page, row] = rnd(hk, d)
        rot = d // 2 if d >= 4 else 2
        self.seqlen_ro = self.capacity + self.seqlen_q + 1
        angles = torch.rand(self.seqlen_ro, rot // 2, generator=gen, dtype=torch.float64) * 6.3
        self.cos, self.sin = (f(angles).to(**opts) for f in (torch.cos, torch.sin))
        self.slopes = torch.rand(b, h, generator=gen).to(self.device) if self.alibi else None

    def begin(self, s):
        return self.leftpad[s] if self.leftpad else 0

    def where(self, s, key):
        if self.paged:
            return int(self.block_table[s, key // self.page]), key % self.page
        return int(self.batch_idx[s]), key

    def kwargs(self):
        dev = self.device
        return dict(k=self.k, v=self.v, rotary_cos=self.cos if self.rotary else None,
                    rotary_sin=self.sin if self.rotary else None,
                    cache_seqlens=torch.tensor(self.cached, dtype=torch.int32, device=dev),
                    cache_batch_idx=self.batch_idx, block_table=self.block_table,
                    cache_leftpad=torch.tensor(self.leftpad, dtype=torch.int32, device=dev) if self.leftpad else None,
                    causal=self.causal, window_size=self.window, softcap=self.softcap, alibi_slopes=self.slopes,
                    rotary_interleaved=self.interleaved, num_splits=self.num_splits, return_softmax_lse=True)

    def run(self):
        k_cache, v_cache = self.k_cache.clone(), self.v_cache.clone()
        out, lse = chiplet_fa.flash_attn_with_kvcache(self.q, k_cache, v_cache, **self.kwargs())
        return out, lse, k_cache, v_cache

    def check_appends(self, k_cache, v_cache):
        """New keys (rotated) and values at cache_seqlens; every other row untouched, bit for bit."""
        expect_k, expect_v = self.k_cache.clone(), self.v_cache.clone()
        for s in range(self.batch):
            new_k = self.k[s]
            if self.rotary:
                pos = torch.arange(self.cached[s], self.cached[s] + self.seqlen_new)
                new_k = rotate_ref(new_k.cpu(), self.cos.cpu()[pos], self.sin.cpu()[pos], self.interleaved)
            for j in range(self.seqlen_new):
                page, row = self.where(s, self.cached[s] + j)
                expect_k[page, row] = new_k[j].to(self.dtype)
                expect_v[page, row] = self.v[s, j]
        for name, got, want in (("k_cache", k_cache, expect_k), ("v_cache", v_cache, expect_v)):
            assert torch.equal(got.isnan(), want.isnan()), f"{name}: rows written outside the appends"
            ok = ~want.isnan()
            ulp = 1e-2 if self.dtype in KERNEL_DTYPES else 1e-6  # the rotation rounds once in the kernel
            assert torch.allclose(got[ok].double(), want[ok].double(), rtol=ulp, atol=ulp), f"{name}: appends differ"

    def reference(self, k_cache, v_cache, dtype):
        """(out, lse) of each sequence over the caches as the call left them."""
        outs, lses = [], []
        per_token = self.causal or self.window != (-1, -1)
        for s in range(self.batch):
            end = self.cached[s] + self.seqlen_new
            rows = [self.where(s, key) for key in range(self.begin(s), end)]
            keys = torch.stack([k_cache[p, r] for p, r in rows]) if rows else k_cache[:0, 0]
            values = torch.stack([v_cache[p, r] for p, r in rows]) if rows else v_cache[:0, 0]
            q = self.q[s]
            if self.rotary:
                pos = torch.arange(self.seqlen_q) + self.cached[s] if per_token else \
                    torch.full((self.seqlen_q,), self.cached[s])
                q = rotate_ref(q.cpu(), self.cos.cpu()[pos], self.sin.cpu()[pos], self.interleaved).to(self.dtype)
            out, lse = attention_ref(q.cpu()[None], keys.cpu()[None], values.cpu()[None], causal=self.causal,
                                     window=self.window, softcap=self.softcap, dtype=dtype,
                                     alibi_slopes=None if self.slopes is None else self.slopes[s].cpu())
            outs.append(out)
            lses.append(lse)
        return torch.cat(outs), torch.cat(lses)


def check_case(case):
    out, lse, k_cache, v_cache = case.run()
    if case.seqlen_new:
        case.check_appends(k_cache, v_cache)
    ref_out, ref_lse = case.reference(k_cache, v_cache, torch.float64)
    same_out, same_lse = case.reference(k_cache, v_cache, case.dtype)
    floor = 1e-3 if case.dtype in KERNEL_DTYPES else 1e-5
    assert_close_to_ref(out, ref_out, same_out, floor)
    assert_close_to_ref(lse, ref_lse, same_lse.double(), floor, what="softmax_lse")


@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
@pytest.mark.parametrize("device", DEVICES_AND_EMULATOR)
@given(data=st.data())
def test_matches_reference(device, paged, data):
    dtype = data.draw(st.sampled_from(dtypes_for(device)), label="dtype")
    check_case(Case(data, device, dtype, paged))


def small_call(device="cpu", dtype=torch.float32, paged=False, **overrides):
    """Arguments of a valid call (2 sequences, GQA 4/2, D = 16), with overrides."""
    dev = torch_device(device)
    opts = dict(dtype=dtype, device=dev)
    cache_shape = (6, 8, 2, 16) if paged else (2, 24, 2, 16)
    args = dict(q=torch.randn(2, 1, 4, 16, **opts), k_cache=torch.randn(*cache_shape, **opts),
                v_cache=torch.randn(*cache_shape, **opts), k=torch.randn(2, 1, 2, 16, **opts),
                v=torch.randn(2, 1, 2, 16, **opts), cache_seqlens=torch.tensor([5, 9], dtype=torch.int32, device=dev))
    if paged:
        args["block_table"] = torch.tensor([[0, 2, 4], [1, 3, 5]], dtype=torch.int32, device=dev)
    args.update(overrides)
    return args


@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("overrides, match", [
    (dict(cache_seqlens=torch.tensor([5, 24], dtype=torch.int32)), r"cache_seqlens\[1\] = 24 leaves no room"),
    (dict(cache_seqlens=torch.tensor([-1, 2], dtype=torch.int32)), r"cache_seqlens\[0\] = -1"),
    (dict(cache_seqlens=None), "cache_seqlens, which must be given"),
    (dict(cache_seqlens=torch.tensor([5, 9])), "cache_seqlens must be a 1-D int32 tensor"),
    (dict(k=None), "k and v must be given together"),
    (dict(q=torch.randn(2, 1, 3, 16)), r"num_heads of q \(3\) must be a positive multiple"),
    (dict(q=torch.randn(2, 1, 4, 16, dtype=torch.float64)), "k_cache has dtype"),
    (dict(num_splits=300), "num_splits must be in 0..256"),
    (dict(rotary_cos=torch.randn(40, 4)), "rotary_cos and rotary_sin must be given together"),
    (dict(rotary_cos=torch.randn(6, 4), rotary_sin=torch.randn(6, 4)), "rotary_cos has 6 rows"),
    (dict(k=None, v=None, rotary_cos=torch.randn(40, 4), rotary_sin=torch.randn(40, 4)), "give k and v"),
])
def test_bad_input_raises_value_error(paged, overrides, match):
    with pytest.raises(ValueError, match=match):
        chiplet_fa.flash_attn_with_kvcache(**small_call(paged=paged, **overrides))


@pytest.mark.parametrize("overrides, match", [
    (dict(block_table=torch.tensor([[6, 2, 4], [1, 3, 5]], dtype=torch.int32)), r"block_table\[0\] names a page outside"),
    (dict(block_table=torch.tensor([[0, 2, 4], [1, -1, 5]], dtype=torch.int32)), r"block_table\[1\] names a page"),
    # Pages past a sequence's keys are never read: their entries may be anything.
    (dict(block_table=torch.tensor([[0, -7, 99], [1, 3, 99]], dtype=torch.int32), k=torch.randn(2, 1, 2, 17)),
     "k must have shape"),
    (dict(k_cache=torch.randn(6, 6, 2, 16), v_cache=torch.randn(6, 6, 2, 16)), "power of two in 1..256"),
    (dict(cache_leftpad=torch.tensor([0, 1], dtype=torch.int32)), "do not apply to a paged cache"),
    (dict(block_table=torch.tensor([[0, 2, 4]], dtype=torch.int32)), "block_table must have batch = 2 rows"),
])
def test_bad_paged_input_raises_value_error(overrides, match):
    with pytest.raises(ValueError, match=match):
        chiplet_fa.flash_attn_with_kvcache(**small_call(paged=True, **overrides))


@pytest.mark.parametrize("overrides, match", [
    (dict(cache_batch_idx=torch.tensor([0, 2], dtype=torch.int32)), r"cache_batch_idx\[1\] = 2 is not a batch entry"),
    (dict(cache_leftpad=torch.tensor([6, 0], dtype=torch.int32)), r"cache_leftpad\[0\] = 6 must be in 0..cache_seqlens"),
    (dict(k_cache=torch.randn(1, 24, 2, 16), v_cache=torch.randn(1, 24, 2, 16)), "pass cache_batch_idx"),
])
def test_bad_contiguous_input_raises_value_error(overrides, match):
    with pytest.raises(ValueError, match=match):
        chiplet_fa.flash_attn_with_kvcache(**small_call(**overrides))


def test_int_cache_seqlens_and_plain_output():
    args = small_call()
    args["cache_seqlens"] = 7
    out = chiplet_fa.flash_attn_with_kvcache(**args)
    assert out.shape == (2, 1, 4, 16)


@pytest.mark.parametrize("paged", [False, True])
def test_opcheck(paged):
    args = small_call(paged=paged)
    op_args = (args.pop("q"), args.pop("k_cache"), args.pop("v_cache"))
    torch.library.opcheck(torch.ops.chiplet_fa.fwd_kvcache.default, op_args, args)


def test_compiled_decode_step_matches_eager():
    args = small_call(paged=True)

    def step(q, k_cache, v_cache, k, v, cache_seqlens, block_table):
        out = chiplet_fa.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=cache_seqlens,
                                                 block_table=block_table, causal=True)
        return out * 2

    eager_caches = (args["k_cache"].clone(), args["v_cache"].clone())
    want = step(args["q"], *eager_caches, args["k"], args["v"], args["cache_seqlens"], args["block_table"])
    got = torch.compile(step, fullgraph=True)(args["q"], args["k_cache"], args["v_cache"], args["k"], args["v"],
                                              args["cache_seqlens"], args["block_table"])
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(args["k_cache"], eager_caches[0])  # the compiled step appended in place too



@pytest.mark.emulated
@pytest.mark.skipif(not chiplet_fa.emulate.available(), reason="needs the emulated CDNA3 build")
@pytest.mark.parametrize("mapping, one_xcd", [("swizzled_head_first", True), ("auto", True), ("head_first", False)])
def test_a_groups_row_blocks_and_splits_share_an_xcd(mapping, one_xcd):
    """4 tokens x GQA 8 = two row blocks a group, 3 splits, 8 groups on 8 XCDs: under the swizzled
    head-first order ("auto") every cache row is read by workgroups of one XCD (docs/decode.md,
    "Placement"); unswizzled, the hardware's round-robin deals them out."""
    dev_args = small_call(dtype=torch.float16, q=torch.randn(4, 4, 16, 16, dtype=torch.float16),
                          k_cache=torch.randn(4, 512, 2, 16, dtype=torch.float16),
                          v_cache=torch.randn(4, 512, 2, 16, dtype=torch.float16),
                          k=None, v=None, cache_seqlens=torch.tensor([500, 300, 400, 100], dtype=torch.int32))
    with chiplet_fa.emulate.trace(num_xcds=8) as launches:
        chiplet_fa.flash_attn_with_kvcache(**dev_args, num_splits=3, mapping=mapping, num_xcds=8)
    attention = [l for l in launches if len(l.reads)]  # the split-KV pass: the one that copies tiles
    assert len(attention) == 1
    reads = attention[0].reads
    cache = reads[reads[:, 2] == 1]  # k_cache rows: (entry, head, row) -> XCDs
    keys = cache[:, 3] * 1_000_000 + cache[:, 4] * 10_000 + cache[:, 5]
    xcds_per_row = torch.zeros(int(keys.max()) + 1, 8, dtype=torch.bool)
    xcds_per_row[keys, cache[:, 1]] = True
    spread = xcds_per_row.sum(1).max().item()
    assert (spread == 1) == one_xcd, f"{mapping}: a cache row read on up to {spread} XCDs"


@pytest.mark.parametrize("rows, mapping, hits, dram_gb", [
    (8, "swizzled_head_first", 0.0, 2.15), (8, "block_first", 0.0, 2.15),
    (32, "swizzled_head_first", 0.5, 2.15), (32, "head_first", 0.0, 4.30), (32, "block_first", 0.0, 4.30)])
def test_l2_model_on_a_decoding_grid(rows, mapping, hits, dram_gb):
    """docs/decode.md's table: a group's second row block re-reads its keys from L2 only when the
    swizzled head-first order keeps it in the group's XCD (MI300X preset, 16 x 32K keys, GQA 8)."""
    from chiplet_fa.locality import Shape, preset, simulate
    shape = Shape(batch=16, num_q_heads=8, num_kv_heads=8, seqlen_q=rows, seqlen_k=32768, head_dim=128,
                  block_m=16, block_n=64)
    p = simulate(preset("mi300x"), shape, mapping)
    assert p.kv_hit_rate == pytest.approx(hits, abs=1e-3)
    assert p.dram_read_bytes / 1e9 == pytest.approx(dram_gb, abs=0.01)
