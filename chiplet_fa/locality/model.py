"""Python face of the C++ locality model: topologies, attention shapes, predictions."""
import copy
from dataclasses import asdict, dataclass
from typing import Callable, Dict, Optional, Tuple

from .. import _C

_L = _C.locality
Topology = _L.Topology
Dispatch = _L.Dispatch
MAPPINGS = tuple(_C.mapping_names)


def presets() -> Dict[str, Topology]:
    """Topology presets by name (mi300x, mi300a, mi308x, mi355x, h100, h200)."""
    return {t.name: t for t in _L.presets()}


def preset(name: str, **overrides) -> Topology:
    """A preset, with fields replaced by keyword (e.g. preset("mi300x", wgs_per_cu=1))."""
    topo = copy.copy(_L.preset(name))
    for key, value in overrides.items():
        if not hasattr(topo, key):
            raise ValueError(f"preset: Topology has no field {key!r}")
        setattr(topo, key, value)
    return topo


def topology_for_domains(num_domains: int) -> Topology:
    """The topology `auto` assumes for a device with this many L2 domains."""
    return _L.topology_for_domains(num_domains)


@dataclass(frozen=True)
class Shape:
    """One attention call as the model sees it (the GPU kernel's tiling by default)."""
    batch: int
    num_q_heads: int
    seqlen_q: int
    head_dim: int = 128
    num_kv_heads: Optional[int] = None  # None: MHA
    seqlen_k: Optional[int] = None      # None: seqlen_q
    elem_bytes: int = 2
    causal: bool = False
    block_m: int = 128
    block_n: int = 64

    def kwargs(self) -> dict:
        d = asdict(self)
        d["num_kv_heads"] = self.num_kv_heads or self.num_q_heads
        d["seqlen_k"] = self.seqlen_k or self.seqlen_q
        return d


@dataclass(frozen=True)
class Prediction:
    """L2 traffic of one mapping; hit_rate counts all L2 traffic (as Nsight's
    lts__t_sector_hit_rate), kv_hit_rate only the K/V reads."""
    kv_read_bytes: int
    kv_hit_bytes: int
    q_read_bytes: int
    o_write_bytes: int
    dram_read_bytes: int
    hit_rate: float
    kv_hit_rate: float


def _check_mapping(mapping: str) -> None:
    if mapping not in MAPPINGS:
        raise ValueError(f"mapping must be one of {', '.join(MAPPINGS)}; got {mapping!r}")


def simulate(topology: Topology, shape: Shape, mapping: str, mapping_xcds: int = -1,
             progress: Optional[Callable[[int, int], None]] = None) -> Prediction:
    """Trace-driven simulation. mapping_xcds: XCD count the mapping assumes (-1: the topology's
    domain count). progress(done, total) is called about every 0.1 s."""
    _check_mapping(mapping)
    return Prediction(**_L.simulate(topology, **shape.kwargs(), mapping=mapping,
                                    mapping_xcds=mapping_xcds, progress=progress))


def estimate(topology: Topology, shape: Shape, mapping: str, mapping_xcds: int = -1) -> Prediction:
    """Closed-form estimate of the same quantities (README.md, section L2 locality model gives the formula)."""
    _check_mapping(mapping)
    return Prediction(**_L.estimate(topology, **shape.kwargs(), mapping=mapping,
                                    mapping_xcds=mapping_xcds))


def choose_mapping(topology: Topology, shape: Shape) -> Tuple[str, Dict[str, Prediction]]:
    """What mapping="auto" picks for this shape on this topology, and the closed-form
    prediction of every candidate (the op's own decision, from the same cache)."""
    name, predicted = _L.choose_mapping(topology, **shape.kwargs())
    return name, {k: Prediction(**v) for k, v in predicted.items()}
