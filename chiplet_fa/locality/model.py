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
    """One attention call as the model sees it (the GPU kernel's tiling by default).

    A packed (variable-length) batch gives each sequence's length: seqlens_q (and seqlens_k,
    default seqlens_q), batch entries each. The model then walks the kernels' ragged grid
    (sequence b has ceil(seqlens_q[b] / block_m) m-blocks per q head), takes each tile's K/V steps
    from its own sequence (causal: bottom-right per sequence) and an ACC is (sequence, KV head);
    seqlen_q / seqlen_k are then bounds like the op's max_seqlen (default: the longest sequence)
    and do not change the prediction. Equal lengths predict what the uniform shape does.
    """
    batch: int
    num_q_heads: int
    seqlen_q: Optional[int] = None      # None: the longest of seqlens_q (required without them)
    head_dim: int = 128
    num_kv_heads: Optional[int] = None  # None: MHA
    seqlen_k: Optional[int] = None      # None: seqlen_q, or the longest of seqlens_k
    elem_bytes: int = 2
    causal: bool = False
    block_m: int = 128
    block_n: int = 64
    seqlens_q: Optional[Tuple[int, ...]] = None  # None: every sequence has seqlen_q
    seqlens_k: Optional[Tuple[int, ...]] = None  # None: seqlens_q (packed), else seqlen_k

    def __post_init__(self):
        for name in ("seqlens_q", "seqlens_k"):
            lens = getattr(self, name)
            if lens is not None:
                object.__setattr__(self, name, tuple(int(n) for n in lens))
        if self.seqlen_q is None and self.seqlens_q is None:
            raise ValueError("Shape: give seqlen_q, or seqlens_q for a packed batch")
        if self.seqlens_k is not None and self.seqlens_q is None:
            raise ValueError("Shape: seqlens_k needs seqlens_q (a packed batch gives both)")
        for name in ("seqlens_q", "seqlens_k"):
            lens = getattr(self, name)
            if lens is not None and len(lens) != self.batch:
                raise ValueError(f"Shape: {name} has {len(lens)} entries for batch {self.batch}")

    @property
    def packed(self) -> bool:
        return self.seqlens_q is not None

    def kwargs(self) -> dict:
        d = asdict(self)
        d["num_kv_heads"] = self.num_kv_heads or self.num_q_heads
        lens_q = list(self.seqlens_q or ())
        lens_k = list(self.seqlens_k if self.seqlens_k is not None else lens_q)
        d["seqlen_q"] = max(lens_q, default=0) if self.seqlen_q is None else self.seqlen_q
        if self.seqlen_k is None:
            d["seqlen_k"] = max(lens_k, default=0) if self.packed else d["seqlen_q"]
        d["seqlens_q"], d["seqlens_k"] = lens_q, lens_k
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
    """Closed-form estimate of the same quantities (docs/l2_model.md gives the formula)."""
    _check_mapping(mapping)
    return Prediction(**_L.estimate(topology, **shape.kwargs(), mapping=mapping,
                                    mapping_xcds=mapping_xcds))


def choose_mapping(topology: Topology, shape: Shape) -> Tuple[str, Dict[str, Prediction]]:
    """What mapping="auto" picks for this shape on this topology, and the closed-form
    prediction of every candidate (the op's own decision, from the same cache)."""
    name, predicted = _L.choose_mapping(topology, **shape.kwargs())
    return name, {k: Prediction(**v) for k, v in predicted.items()}
