"""Properties of the workgroup mapping (csrc/mapping.h), checked through the same C++ function
the kernels call. Positions: head-first order pos = (batch * H_q + q_head) * M + m_block; an ACC
(one KV head with its G = H_q / H_kv query heads) is acc = batch * H_kv + q_head // G."""
import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from chiplet_fa import MAPPINGS, longest_first_section_rows, map_workgroups

NAIVE_TWIN = {"swizzled_head_first": "head_first", "swizzled_block_first": "block_first"}
SWIZZLED = tuple(NAIVE_TWIN)
XCDS = st.sampled_from([1, 2, 4, 6, 8])


@st.composite
def grids(draw):
    """(batch, H_q, H_kv, num_m_blocks, X) with H_kv any divisor of H_q."""
    num_q_heads = draw(st.integers(1, 48))
    divisors = [d for d in range(1, num_q_heads + 1) if num_q_heads % d == 0]
    num_kv_heads = draw(st.sampled_from(divisors))
    return (draw(st.integers(1, 3)), num_q_heads, num_kv_heads, draw(st.integers(1, 20)), draw(XCDS))


# Shapes public implementations get wrong (H or ACC count not divisible by X), plus GQA ones.
HARD_SHAPES = [
    (1, 6, 6, 7, 8), (1, 12, 12, 5, 8), (1, 20, 20, 3, 8), (2, 20, 20, 9, 6),
    (1, 28, 4, 15, 8), (1, 48, 12, 5, 8), (1, 48, 12, 7, 6), (3, 6, 2, 1, 4), (1, 1, 1, 1, 8),
    (1, 128, 8, 9, 8), (2, 32, 8, 4, 8),
]


def with_hard_shapes(test):
    for shape in HARD_SHAPES:
        test = example(shape)(test)
    return test


def mapped(policy, shape):
    batch, num_q_heads, num_kv_heads, num_m_blocks, num_xcds = shape
    tiles = map_workgroups(policy, batch, num_q_heads, num_kv_heads, num_m_blocks, num_xcds)
    assert tiles.dtype == torch.int64 and tiles.shape == (batch * num_q_heads * num_m_blocks, 3)
    return tiles


def positions(tiles, shape):
    _, num_q_heads, _, num_m_blocks, _ = shape
    return (tiles[:, 0] * num_q_heads + tiles[:, 1]) * num_m_blocks + tiles[:, 2]


def accs(tiles, shape):
    _, num_q_heads, num_kv_heads, _, _ = shape
    return tiles[:, 0] * num_kv_heads + tiles[:, 1] // (num_q_heads // num_kv_heads)


def domain_wids(grid, num_xcds, x):
    """Workgroups that round-robin dispatch sends to domain x, in dispatch order."""
    return torch.arange(grid)[x::num_xcds]


@with_hard_shapes
@given(grids())
def test_every_policy_is_a_bijection(shape):
    batch, num_q_heads, _, num_m_blocks, _ = shape
    grid = batch * num_q_heads * num_m_blocks
    for policy in MAPPINGS:
        tiles = mapped(policy, shape)
        assert (tiles >= 0).all()
        assert (tiles.max(dim=0).values < torch.tensor([batch, num_q_heads, num_m_blocks])).all()
        assert torch.equal(positions(tiles, shape).sort().values, torch.arange(grid)), policy


@with_hard_shapes
@given(grids())
def test_swizzled_head_first_keeps_each_acc_in_one_domain_when_x_divides_acc_count(shape):
    batch, _, num_kv_heads, _, num_xcds = shape
    if (batch * num_kv_heads) % num_xcds:
        return  # covered by the general property below
    tiles = mapped("swizzled_head_first", shape)
    acc = accs(tiles, shape)
    wid = torch.arange(len(tiles))
    for a in acc.unique():
        assert (wid[acc == a] % num_xcds).unique().numel() == 1, f"ACC {a} spans several domains"
    for x in range(num_xcds):
        pos = positions(tiles[domain_wids(len(tiles), num_xcds, x)], shape)
        # Head-first within the domain: one ACC after another, m-blocks of a head in order.
        assert (pos.diff() == 1).all()


@with_hard_shapes
@given(grids())
def test_swizzled_policies_give_each_domain_one_contiguous_run(shape):
    """mapping.h's guarantee for every X: domain x owns one contiguous run of head-first order,
    the runs follow each other in domain order, and their sizes are the dispatch counts. Hence
    ACCs are visited in increasing order, at most X-1 of them are split, each across
    consecutive domains."""
    num_xcds = shape[-1]
    head_first = mapped("swizzled_head_first", shape)
    grid = len(head_first)
    runs = []
    for x in range(num_xcds):
        wids = domain_wids(grid, num_xcds, x)
        pos = positions(head_first[wids], shape)
        assert len(pos) == grid // num_xcds + (x < grid % num_xcds)
        if len(pos):
            assert (pos.diff() == 1).all(), f"domain {x} is not one contiguous run"
            runs.append(pos)
            acc = accs(head_first[wids], shape)
            assert (acc.diff() >= 0).all(), f"domain {x} does not visit ACCs in increasing order"
        # The block-first twin covers the same tiles per domain, only in another order.
        block_first = positions(mapped("swizzled_block_first", shape)[wids], shape)
        assert torch.equal(block_first.sort().values, pos)
    assert torch.equal(torch.cat(runs), torch.arange(grid))

    acc = accs(head_first, shape)
    domain = torch.arange(grid) % num_xcds
    split = 0
    for a in acc.unique():
        domains = domain[acc == a].unique()
        if domains.numel() > 1:
            split += 1
            assert (domains.diff() == 1).all(), f"ACC {a} split over non-consecutive domains"
    assert split <= num_xcds - 1


@with_hard_shapes
@given(grids())
def test_swizzled_block_first_walks_m_block_major_within_each_domain(shape):
    batch, num_q_heads, num_kv_heads, _, num_xcds = shape
    tiles = mapped("swizzled_block_first", shape)
    for x in range(num_xcds):
        t = tiles[domain_wids(len(tiles), num_xcds, x)]
        row = t[:, 0] * num_q_heads + t[:, 1]
        key = t[:, 2] * (batch * num_q_heads) + row  # (m_block, row) lexicographic
        assert (key.diff() > 0).all(), f"domain {x} is not m_block-major"
    if (batch * num_kv_heads) % num_xcds == 0:
        # Each domain's tiles share the KV heads swizzled_head_first gives that domain.
        head_first = mapped("swizzled_head_first", shape)
        for x in range(num_xcds):
            wids = domain_wids(len(tiles), num_xcds, x)
            assert set(accs(tiles[wids], shape).tolist()) == set(accs(head_first[wids], shape).tolist())


@with_hard_shapes
@given(grids())
def test_one_domain_reduces_swizzled_policies_to_their_naive_twins(shape):
    one_domain = shape[:-1] + (1,)
    for swizzled, naive in NAIVE_TWIN.items():
        assert torch.equal(mapped(swizzled, one_domain), mapped(naive, one_domain))


@with_hard_shapes
@given(grids())
def test_naive_policies_follow_their_order_and_ignore_domains(shape):
    batch, num_q_heads, _, num_m_blocks, _ = shape
    grid = batch * num_q_heads * num_m_blocks
    wid = torch.arange(grid)
    head_first = mapped("head_first", shape)
    assert torch.equal(positions(head_first, shape), wid)  # consecutive wids walk one head's m-blocks
    block_first = mapped("block_first", shape)
    rows = batch * num_q_heads
    assert torch.equal(block_first[:, 2], wid // rows)  # consecutive wids walk the rows of one m-block
    assert torch.equal(block_first[:, 0] * num_q_heads + block_first[:, 1], wid % rows)
    for naive in ("head_first", "block_first"):
        assert torch.equal(mapped(naive, shape[:-1] + (1,)), mapped(naive, shape))


def check_longest_first(plain, causal, rows_of, domains, section_rows, first_blocks_longest=False):
    """What causal=True must do under a head-first policy: each domain (its wids in dispatch order)
    computes the tiles it computes without it, the sections (section_rows rows each) come in
    order, and within one section the blocks never increase (never decrease with
    first_blocks_longest): longest tiles first."""
    grid = plain.shape[0]
    for x in range(domains):
        w = domain_wids(grid, domains, x)
        assert sorted(map(tuple, causal[w].tolist())) == sorted(map(tuple, plain[w].tolist()))
        section = rows_of(causal[w]) // section_rows
        m = causal[w, 2] * (-1 if first_blocks_longest else 1)
        assert (section[1:] >= section[:-1]).all()
        same = section[1:] == section[:-1]
        assert (m[1:][same] <= m[:-1][same]).all()


@pytest.mark.parametrize("section_rows", [1, 3, 8, 64])
@pytest.mark.parametrize("first_blocks_longest", [False, True])
@with_hard_shapes
@given(grids())
def test_causal_order_walks_sections_longest_first(section_rows, first_blocks_longest, shape):
    """causal=True (the order the kernels run a causal call in): the head-first policies walk
    sections of section_rows rows longest tile first within each domain's range (the last blocks
    first, or the first ones for the backward's key blocks); with one row a section the naive policy
    reverses each row (keeps it, keys); the block-first policies are unchanged."""
    batch, num_q_heads, num_kv_heads, num_m_blocks, num_xcds = shape
    for policy in MAPPINGS:
        plain = mapped(policy, shape)
        causal = map_workgroups(policy, batch, num_q_heads, num_kv_heads, num_m_blocks, num_xcds, causal=True,
                                section_rows=section_rows, first_blocks_longest=first_blocks_longest)
        if "block_first" in policy:
            assert torch.equal(causal, plain), policy
            continue
        check_longest_first(plain, causal, lambda t: t[:, 0] * num_q_heads + t[:, 1],
                            num_xcds if policy in SWIZZLED else 1, section_rows, first_blocks_longest)
        if policy == "head_first" and section_rows == 1:
            assert torch.equal(causal[:, :2], plain[:, :2])
            assert torch.equal(causal[:, 2], plain[:, 2] if first_blocks_longest else num_m_blocks - 1 - plain[:, 2])


@given(st.integers(1, 4096), st.integers(1, 1024), st.integers(1, 512), st.integers(0, 1 << 30),
       st.sampled_from([1, 2, 4, 8]), st.integers(0, 1 << 27))
@example(128, 11, 132, 2 * 2048 * 64 * 2, 1, 60 << 20)  # B=8 H=16 N=2K D=64 causal on an H200
@example(32, 64, 132, 2 * 8192 * 128 * 2, 1, 60 << 20)  # H=32 N=8K D=128: the L2 halves 8 to 4
@example(32, 32, 132, 4 * 4096 * 128 * 8, 1, 60 << 20)  # backward, 4x32/8 N=4K D=128: the span keeps 4
def test_section_rows_rule(rows, m_blocks, workers, data_bytes, group, l2_bytes):
    """The fewest rows (a power of two) with twice the workers' tiles, halved while their data
    exceed half the L2 and they are more than the workers span in head-first order; at most the rows."""
    s = longest_first_section_rows(rows, m_blocks, workers, data_bytes, group, l2_bytes)
    assert 1 <= s <= rows
    assert s == rows or s & (s - 1) == 0
    fit = rows if data_bytes == 0 else l2_bytes // 2 // data_bytes * group
    span = -(-workers // m_blocks)
    assert s == 1 or s <= fit or s <= span
    assert s == rows or s * m_blocks >= 2 * workers or 2 * s > max(fit, span)
    assert s == 1 or (s // 2) * m_blocks < 2 * workers


def test_section_rows_rule_examples():
    h200 = dict(workers=132, group=1, l2_bytes=60 << 20)
    assert longest_first_section_rows(128, 11, bytes_per_head=2 * 2048 * 64 * 2, **h200) == 32
    assert longest_first_section_rows(32, 64, bytes_per_head=2 * 8192 * 128 * 2, **h200) == 4
    assert longest_first_section_rows(32, 32, bytes_per_head=4 * 4096 * 128 * 8, **h200) == 4
    assert longest_first_section_rows(24, 6, bytes_per_head=0, **h200) == 24


@pytest.mark.parametrize("num_xcds", [1, 8])
def test_auto_resolves_by_domain_count(num_xcds):
    expected = "swizzled_head_first" if num_xcds > 1 else "head_first"
    assert torch.equal(map_workgroups("auto", 2, 12, 4, 5, num_xcds),
                       map_workgroups(expected, 2, 12, 4, 5, num_xcds))


def test_mappings_lists_the_four_policies():
    assert sorted(MAPPINGS) == sorted(["block_first", "head_first", "swizzled_block_first",
                                       "swizzled_head_first"])


@pytest.mark.parametrize("args, match", [
    (("diagonal", 1, 4, 4, 2, 8), "mapping must be one of"),
    (("head_first", 1, 6, 4, 2, 8), "multiple of num_kv_heads"),
    (("head_first", 1, 4, 0, 2, 8), "multiple of num_kv_heads"),
    (("head_first", 1, 4, 4, 2, 0), "num_xcds"),
    (("head_first", -1, 4, 4, 2, 8), "batch"),
    (("head_first", 1, 65536, 1, 65536, 8), "int32"),
])
def test_map_workgroups_rejects_bad_arguments(args, match):
    with pytest.raises(ValueError, match=match):
        map_workgroups(*args)


def test_empty_grid_maps_nothing():
    assert map_workgroups("swizzled_head_first", 0, 8, 8, 4, 8).shape == (0, 3)
    assert map_workgroups("swizzled_block_first", 2, 8, 8, 0, 8).shape == (0, 3)
