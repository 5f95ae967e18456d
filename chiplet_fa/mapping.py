"""The workgroup mapping, computed by the same C++ function the kernels call."""
import torch

from . import _C

MAPPINGS = tuple(_C.mapping_names)


def map_workgroups(policy: str, batch: int, num_q_heads: int, num_kv_heads: int,
                   num_m_blocks: int, num_xcds: int) -> torch.Tensor:
    """Return an int64 tensor (grid, 3): row wid is (batch, q_head, m_block) of workgroup wid.

    grid = batch * num_q_heads * num_m_blocks; under round-robin dispatch workgroup wid runs
    on L2 domain (XCD) wid % num_xcds.
    """
    return _C.map_workgroups(policy, batch, num_q_heads, num_kv_heads, num_m_blocks, num_xcds)


def num_l2_domains(device) -> int:
    """L2 domains (XCDs) chiplet_fa detects on `device`, the value num_xcds=-1 resolves to."""
    return _C.num_l2_domains(str(torch.device(device)))
