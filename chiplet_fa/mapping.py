"""The workgroup mapping, computed by the same C++ function the kernels call."""
from typing import Optional, Sequence

import torch

from . import _C

MAPPINGS = tuple(_C.mapping_names)


def map_workgroups(policy: str, batch: int, num_q_heads: int, num_kv_heads: int,
                   num_m_blocks: int, num_xcds: int, seqlen_k: int = -1, head_dim: int = 128,
                   elem_bytes: int = 2, causal: bool = False, section_rows: int = 1,
                   first_blocks_longest: bool = False,
                   blocks_per_sequence: Optional[Sequence[int]] = None) -> torch.Tensor:
    """Return an int64 tensor (grid, 3): row wid is (batch, q_head, m_block) of workgroup wid.

    grid = batch * num_q_heads * num_m_blocks; under round-robin dispatch workgroup wid runs
    on L2 domain (XCD) wid % num_xcds. Policy "auto" resolves with the L2 model for the shape
    given by the remaining arguments (seqlen_k -1: num_m_blocks * 128). causal=True gives the order
    the kernels run a causal call in: the head-first policies cut the (batch, q_head) rows into
    sections of section_rows rows and walk the part of a section in each domain's range m-block by
    m-block from the last (longest tiles first; section_rows=1 reverses each row), a permutation
    within each domain's range that keeps the policy's guarantees; the block-first policies are
    unchanged. first_blocks_longest=True: the backward's key-block grid (rows = (batch, kv_head),
    blocks = key blocks), whose first blocks are the longest, so sections are walked from the first
    block (section_rows=1 is then the plain order). The sm90 kernels size their sections per launch
    with `longest_first_section_rows` (their workers and the L2); the other kernels use 1.
    blocks_per_sequence: a ragged grid (variable-length batch): sequence b has this many m-blocks
    per q head (batch must be its length, num_m_blocks at least its largest entry), and
    grid = num_q_heads * sum(blocks_per_sequence).
    """
    blocks = None if blocks_per_sequence is None else [int(m) for m in blocks_per_sequence]
    return _C.map_workgroups(policy, batch, num_q_heads, num_kv_heads, num_m_blocks, num_xcds,
                             seqlen_k, head_dim, elem_bytes, causal, section_rows, first_blocks_longest, blocks)


def longest_first_section_rows(rows: int, m_blocks: int, workers: int, bytes_per_head: int,
                               group: int, l2_bytes: int) -> int:
    """Rows per longest-first section for `workers` tiles running at once in one L2 domain of
    `l2_bytes`: the fewest (a power of two) giving at least 2 * workers tiles, halved while the
    rows' data (bytes_per_head per `group` rows) exceed half the L2 and the section is wider than
    the ceil(workers / m_blocks) rows the workers span anyway; 1 <= result <= rows."""
    return _C.longest_first_section_rows(rows, m_blocks, workers, bytes_per_head, group, l2_bytes)


def num_l2_domains(device) -> int:
    """L2 domains (XCDs) chiplet_fa detects on `device`, the value num_xcds=-1 resolves to."""
    return _C.num_l2_domains(str(torch.device(device)))
