"""The workgroup mapping over ragged grids (variable-length batches: sequence b has M_b m-blocks
per q head), through the same C++ function the kernels call. Head-first order is sequence by
sequence, rows (q heads) one after another; an ACC is (sequence, KV head)."""
import itertools

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st
from test_mapping import check_longest_first

from chiplet_fa import MAPPINGS, map_workgroups

XCDS = st.sampled_from([1, 2, 3, 4, 8])


@st.composite
def ragged(draw):
    """(blocks per sequence, H_q, H_kv, X): sequences may be empty, lengths need not be equal."""
    blocks = draw(st.lists(st.integers(0, 9), min_size=1, max_size=6))
    num_q_heads = draw(st.integers(1, 12))
    num_kv_heads = draw(st.sampled_from([d for d in range(1, num_q_heads + 1) if num_q_heads % d == 0]))
    return blocks, num_q_heads, num_kv_heads, draw(XCDS)


def with_hard_cases(test):
    for case in [([0], 4, 4, 8), ([3, 0, 5], 6, 2, 8), ([1, 1, 1], 1, 1, 8), ([7, 2, 0, 0, 9], 5, 5, 3),
                 ([0, 4, 0], 8, 1, 4), ([2, 9, 4, 1], 12, 4, 8)]:
        test = example(case)(test)
    return test


def mapped(policy, case):
    blocks, num_q_heads, num_kv_heads, num_xcds = case
    return map_workgroups(policy, len(blocks), num_q_heads, num_kv_heads, max(blocks), num_xcds,
                          blocks_per_sequence=blocks)


def head_first_positions(tiles, case):
    """Position of each tile in head-first order: sequence start + head * M_b + m_block."""
    blocks, num_q_heads, _, _ = case
    offsets = torch.tensor([0] + list(itertools.accumulate(blocks)))
    m_b = torch.tensor(blocks)[tiles[:, 0]]
    return num_q_heads * offsets[tiles[:, 0]] + tiles[:, 1] * m_b + tiles[:, 2]


def accs(tiles, case):
    _, num_q_heads, num_kv_heads, _ = case
    return tiles[:, 0] * num_kv_heads + tiles[:, 1] // (num_q_heads // num_kv_heads)


@pytest.mark.parametrize("section_rows", [1, 2, 5])
@pytest.mark.parametrize("first_blocks_longest", [False, True])
@with_hard_cases
@given(ragged())
def test_causal_order_walks_sections_longest_first(section_rows, first_blocks_longest, case):
    """causal=True on a ragged grid: as on a uniform one (test_mapping.check_longest_first), with
    sections of rows across sequences of different lengths; one row a section reverses each row
    within its own sequence's m-blocks (keeps it with first_blocks_longest)."""
    blocks, num_q_heads, num_kv_heads, num_xcds = case
    for policy in MAPPINGS:
        plain = mapped(policy, case)
        causal = map_workgroups(policy, len(blocks), num_q_heads, num_kv_heads, max(blocks), num_xcds,
                                causal=True, section_rows=section_rows, first_blocks_longest=first_blocks_longest,
                                blocks_per_sequence=blocks)
        if "block_first" in policy:
            assert torch.equal(causal, plain), policy
            continue
        check_longest_first(plain, causal, lambda t: t[:, 0] * num_q_heads + t[:, 1],
                            num_xcds if "swizzled" in policy else 1, section_rows, first_blocks_longest)
        if policy == "head_first" and section_rows == 1:
            reversed_m = torch.tensor(blocks)[plain[:, 0]] - 1 - plain[:, 2]
            assert torch.equal(causal[:, :2], plain[:, :2])
            assert torch.equal(causal[:, 2], plain[:, 2] if first_blocks_longest else reversed_m)


@with_hard_cases
@given(ragged())
def test_every_policy_is_a_bijection_over_the_ragged_tiles(case):
    blocks, num_q_heads, _, _ = case
    grid = num_q_heads * sum(blocks)
    for policy in MAPPINGS:
        tiles = mapped(policy, case)
        assert tiles.shape == (grid, 3), policy
        if grid == 0:
            continue
        assert (tiles[:, 2] < torch.tensor(blocks)[tiles[:, 0]]).all(), f"{policy}: block past its sequence"
        assert (tiles[:, 1] < num_q_heads).all() and (tiles >= 0).all()
        assert torch.equal(head_first_positions(tiles, case).sort().values, torch.arange(grid)), policy


@given(st.integers(1, 4), st.integers(1, 8), st.integers(1, 6), XCDS)
def test_equal_lengths_map_exactly_as_the_uniform_grid(batch, num_q_heads, num_m_blocks, num_xcds):
    for policy in MAPPINGS:
        uniform = map_workgroups(policy, batch, num_q_heads, 1, num_m_blocks, num_xcds)
        ragged_tiles = map_workgroups(policy, batch, num_q_heads, 1, num_m_blocks, num_xcds,
                                      blocks_per_sequence=[num_m_blocks] * batch)
        assert torch.equal(uniform, ragged_tiles), policy


@with_hard_cases
@given(ragged())
def test_swizzled_policies_keep_their_locality_guarantee(case):
    """Each domain owns one contiguous run of head-first order (sizes = dispatch counts), visits
    ACCs in increasing order, and at most X-1 ACCs are split, each across consecutive domains;
    the block-first twin covers the same tiles per domain."""
    num_xcds = case[-1]
    head_first = mapped("swizzled_head_first", case)
    block_first = mapped("swizzled_block_first", case)
    grid = len(head_first)
    runs = []
    for x in range(num_xcds):
        wids = torch.arange(grid)[x::num_xcds]
        pos = head_first_positions(head_first[wids], case)
        if len(pos):
            assert (pos.diff() == 1).all(), f"domain {x} is not one contiguous run"
            assert (accs(head_first[wids], case).diff() >= 0).all()
            runs.append(pos)
        assert torch.equal(head_first_positions(block_first[wids], case).sort().values, pos)
    if grid:
        assert torch.equal(torch.cat(runs), torch.arange(grid))
    domain = torch.arange(grid) % num_xcds
    acc = accs(head_first, case)
    split = 0
    for a in acc.unique():
        domains = domain[acc == a].unique()
        split += domains.numel() > 1
        assert (domains.diff() == 1).all(), f"ACC {a} split over non-consecutive domains"
    assert split <= num_xcds - 1


@with_hard_cases
@given(ragged())
def test_block_first_walks_m_block_major_within_each_domain(case):
    blocks, num_q_heads, _, num_xcds = case
    for policy in ("swizzled_block_first", "block_first"):
        tiles = mapped(policy, case)
        x_count = num_xcds if policy.startswith("swizzled") else 1
        for x in range(x_count):
            t = tiles[torch.arange(len(tiles))[x::x_count]]
            key = t[:, 2] * (len(blocks) * num_q_heads) + t[:, 0] * num_q_heads + t[:, 1]
            assert (key.diff() > 0).all(), f"{policy}: domain {x} is not m_block-major"


@with_hard_cases
@given(ragged())
def test_naive_policies_ignore_domains_and_swizzled_ones_reduce_to_them_on_one(case):
    one = case[:-1] + (1,)
    for naive, swizzled in (("head_first", "swizzled_head_first"), ("block_first", "swizzled_block_first")):
        assert torch.equal(mapped(naive, case), mapped(naive, one))
        assert torch.equal(mapped(swizzled, one), mapped(naive, one))
    tiles = mapped("head_first", case)
    assert torch.equal(head_first_positions(tiles, case), torch.arange(len(tiles)))


def test_ragged_arguments_are_checked():
    import pytest
    with pytest.raises(ValueError, match="blocks_per_sequence has 2 entries for batch 3"):
        map_workgroups("head_first", 3, 4, 4, 5, 8, blocks_per_sequence=[1, 2])
    with pytest.raises(ValueError, match="entries must be in 0..5"):
        map_workgroups("head_first", 2, 4, 4, 5, 8, blocks_per_sequence=[1, 6])
