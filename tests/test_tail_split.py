"""The sm90 forward's split of its last partial round over keys (kernels/tail_split.h): the plan
and its pieces through the kernels' own functions, and (marked gpu) the kernel on a shape it splits."""
import collections

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import chiplet_fa
from devices import needs_cuda, skip_unless_built
from reference import assert_close_to_ref, attention_ref

split = chiplet_fa._C.tail_split


@pytest.mark.parametrize("tiles, workers, tile_blocks, tail, units", [
    (2048, 132, 64, 68, 132),   # H=32 N=8K D=128: 15.52 rounds
    (4096, 132, 128, 4, 132),   # H=32 N=16K
    (4096, 132, 64, 4, 128),    # GQA 64/8 N=8K: 256 blocks left, two a unit
    (8192, 132, 64, 8, 132),    # H=128 N=8K
    (2112, 132, 64, 0, 0),      # whole rounds
    (2110, 132, 64, 0, 0),      # 130 of 132 busy in the last round: less than an eighth idle
    (100, 132, 64, 0, 0),       # one round, less than the workers
    (133, 132, 200, 1, 100),    # one tile left of 200 blocks: 100 units of two
    (192, 132, 4, 60, 120),     # 240 blocks left: 120 units of two
    (192, 132, 2, 0, 0),        # 120 blocks: 60 units, no more than the tiles left
    (192, 132, 1 << 28, 0, 0),  # units * blocks past 32 bits
])
def test_plan(tiles, workers, tile_blocks, tail, units):
    s = split(tiles, workers, tile_blocks)
    assert (s["tail"], s["units"]) == (tail, units)
    if units:
        assert s["first"] == tiles - tail
    else:
        assert not s["pieces"] and not s["tile_slots"]


@given(tiles=st.integers(0, 3000), workers=st.integers(1, 300), tile_blocks=st.integers(0, 300))
def test_pieces_cover_each_left_tile_once_and_merge_in_key_order(tiles, workers, tile_blocks):
    s = split(tiles, workers, tile_blocks)
    if not s["units"]:
        return
    assert s["first"] + s["tail"] == tiles and 0 < s["tail"] < s["units"] <= workers
    blocks_of = collections.Counter()
    pieces_of = collections.Counter()
    by_tile = collections.defaultdict(list)
    for unit, tile, first, end, slot in s["pieces"]:
        assert 0 <= tile < s["tail"] and 0 <= first < end <= tile_blocks
        assert slot in (2 * unit, 2 * unit + 1)
        blocks_of[unit] += end - first
        pieces_of[unit] += 1
        by_tile[tile].append((first, end, slot))
    # Every unit (a worker's claim) gets an equal share, at least two blocks, in one or two pieces.
    assert sorted(blocks_of) == list(range(s["units"]))
    assert max(blocks_of.values()) - min(blocks_of.values()) <= 1 and min(blocks_of.values()) >= 2
    assert max(pieces_of.values()) <= 2
    assert len({p[4] for p in s["pieces"]}) == len(s["pieces"])
    for tile in range(s["tail"]):
        pieces = sorted(by_tile[tile])
        assert [p[0] for p in pieces] == [0] + [p[1] for p in pieces[:-1]] and pieces[-1][1] == tile_blocks
        assert [p[2] for p in pieces] == s["tile_slots"][tile]  # the merge's order is the keys'


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="workers"):
        split(10, 0, 4)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("head_dim, dtype, softcap", [(128, torch.bfloat16, 0.0), (96, torch.float16, 0.0),
                                                      (128, torch.float16, 20.0), (256, torch.bfloat16, 0.0),
                                                      (192, torch.float16, 20.0)])
def test_split_tiles_match_reference_and_repeat_bitwise(head_dim, dtype, softcap):
    if not chiplet_fa.build_info()["kernel_path"].startswith("sm90"):
        pytest.skip("only the sm90 forward runs persistent workers")
    skip_unless_built(head_dim)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    kv_heads = -(-sms // 4)
    # Two tiles of 128 rows a head; 5 key blocks of 128 (more where the head dim's blocks are
    # narrower), the last partial.
    heads, seqlen_q, seqlen_k = 3 * kv_heads, 200, 600
    assert split(2 * heads, sms, 5)["units"] and split(2 * heads, sms, 10)["units"], "the shape must split"
    gen = torch.Generator().manual_seed(3)

    def rand(n, h):
        return torch.randn((1, n, h, head_dim), generator=gen, dtype=torch.float64).to("cuda", dtype)

    q, k, v = rand(seqlen_q, heads), rand(seqlen_k, kv_heads), rand(seqlen_k, kv_heads)
    # NaN left in the caching allocator: a slot or count read before it was written shows.
    torch.full((64 << 20,), float("nan"), device="cuda")
    args = (q, k, v, None, False, "head_first", -1, -1, -1, softcap)
    out, lse = torch.ops.chiplet_fa.fwd(*args)
    out_ref, lse_ref = attention_ref(q, k, v, softcap=softcap)
    out_pt, lse_pt = attention_ref(q, k, v, softcap=softcap, dtype=dtype)
    assert_close_to_ref(out, out_ref, out_pt, 1e-3 if dtype == torch.float16 else 8e-3, "out")
    assert_close_to_ref(lse, lse_ref, lse_pt.float(), 1e-3, "lse")
    again = torch.ops.chiplet_fa.fwd(*args)
    assert torch.equal(out, again[0]) and torch.equal(lse, again[1])
