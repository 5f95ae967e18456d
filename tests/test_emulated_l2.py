"""The emulated kernels' per-XCD K/V access streams against the L2 model's own trace (issue #11).

The emulated dispatcher deals workgroups over 8 XCDs round-robin, the kernels pick their tile
with map_workgroup(blockIdx.x), and the copy hook records which rows of q, k, v each workgroup
read. What must agree with the model: per XCD, its workgroups in dispatch order, each with its Q
bytes and its K/V tile pairs in the order the kernel read them; then the simulator gives the same
traffic on both. What differs: K/V bytes of a partial last tile (the kernel reads the rows that
exist, the model counts whole tiles), and everything about timing (the emulator has none; how
an XCD's workgroups interleave is the simulator's model in both replays).
"""
import pytest
import torch

import chiplet_fa
from chiplet_fa.emulate import compare_with_model, per_xcd_tiles, trace
from devices import needs_emulation

pytestmark = [pytest.mark.emulated, needs_emulation]

# (batch, q heads, kv heads, seqlen_q, seqlen_k, head_dim, causal)
SHAPES = [
    (1, 16, 16, 256, 256, 64, False),  # 16 ACCs on 8 XCDs: whole ACCs per XCD under the swizzle
    (1, 8, 2, 300, 200, 128, True),    # GQA, causal with N_q > N_k, 32-key tiles, 24 workgroups
    (2, 6, 2, 257, 130, 40, True),     # batch 2, a padded head dim, grid not a multiple of 8
    (1, 4, 2, 130, 100, 256, True),    # the widest head: 64-row tiles, 16 keys a step
]


def qkv(batch, heads, kv_heads, seqlen_q, seqlen_k, head_dim, dtype=torch.float16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, seqlen_q, heads, head_dim, generator=gen).to(dtype)
    k, v = (torch.randn(batch, seqlen_k, kv_heads, head_dim, generator=gen).to(dtype) for _ in range(2))
    return q, k, v


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s[:6])) + ("-causal" if s[6] else ""))
@pytest.mark.parametrize("mapping", chiplet_fa.MAPPINGS)
def test_each_xcd_reads_what_the_model_replays(shape, mapping):
    *dims, causal = shape
    c = compare_with_model(*qkv(*dims), causal=causal, mapping=mapping, mapping_xcds=8)
    assert c.differences == [] and c.same_streams
    assert c.emulated_prediction == c.model_prediction


def test_partial_tiles_are_where_the_bytes_differ():
    whole = compare_with_model(*qkv(1, 4, 4, 128, 256, 64), mapping="head_first")
    partial = compare_with_model(*qkv(1, 4, 4, 128, 200, 64), mapping="head_first")
    assert whole.emulated_kv_bytes == whole.model_prediction.kv_read_bytes
    # 200 keys in 64-key tiles: the last tile has 8 rows, the model counts 64.
    rows_short = 4 * (256 - 200) * 2  # per workgroup's ACC: K and V
    row_bytes = 128
    assert partial.model_prediction.kv_read_bytes - partial.emulated_kv_bytes == rows_short * row_bytes


def test_swizzled_head_first_gives_each_xcd_whole_accs():
    c = compare_with_model(*qkv(1, 16, 16, 256, 256, 64), mapping="swizzled_head_first")
    tiles = per_xcd_tiles(c.emulated)
    accs = {x: {p // 4 for p in pairs} for x, pairs in tiles.items()}  # 4 K/V tiles per ACC
    assert all(len(a) == 2 for a in accs.values())  # 16 ACCs over 8 XCDs
    assert len(set().union(*accs.values())) == 16  # ... none on two XCDs
    naive = per_xcd_tiles(compare_with_model(*qkv(1, 16, 16, 256, 256, 64), mapping="head_first").emulated)
    assert all(len({p // 4 for p in pairs}) > 2 for pairs in naive.values())


def test_backward_main_pass_keeps_an_accs_queries_on_one_xcd():
    # bwd_params.h: the main pass maps (batch, kv_head) like an ACC, so the Q and dO rows of an
    # ACC's query heads are streamed by workgroups of one XCD under swizzled_head_first.
    q, k, v = qkv(1, 16, 8, 128, 256, 32)
    out, lse = torch.ops.chiplet_fa.fwd(q, k, v, None, False, "swizzled_head_first", 8)
    with trace(8) as launches:
        torch.ops.chiplet_fa.bwd(torch.randn_like(q), q, k, v, out, lse, None, False, "swizzled_head_first", 8)
    main = [l for l in launches if "launch_main_pass" in l.where]
    assert len(main) == 1
    reads, regions = main[0].reads, main[0].regions
    streamed = (reads[:, 2] == regions.index("q")) | (reads[:, 2] == regions.index("dout"))
    xcds_of_acc = {}
    for _, xcd, _, batch, head, _ in reads[streamed].tolist():
        xcds_of_acc.setdefault((batch, head // 2), set()).add(xcd)
    assert len(xcds_of_acc) == 8 and all(len(x) == 1 for x in xcds_of_acc.values())
