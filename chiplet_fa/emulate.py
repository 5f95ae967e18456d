"""The emulated CDNA3 backend of a CPU build made with CHIPLET_FA_EMULATE=cdna3 (docs/emulator.md):
torch.ops.chiplet_fa.fwd/bwd on float16/bfloat16 CPU tensors run the HIP kernels on the host, and what they read can be traced.

The emulated dispatcher deals workgroups out as an MI300X does, workgroup wid to XCD
wid % num_xcds. `trace()` records, per launch, which rows of q, k, v (and dout) every workgroup
read, in its order; `xcd_streams()` turns a forward launch's record into what the L2 simulator
replays (per XCD, per workgroup in dispatch order: its Q bytes and its K/V tile pairs in the
order it read them); `compare_with_model()` puts those next to the model's own trace for the same
shape and replays both.
"""
import contextlib
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Tuple

import torch

from . import _C
from .locality import Shape, Topology, preset, simulate
from .locality.model import Prediction

# Columns of a launch's reads.
WID, XCD, REGION, BATCH, HEAD, ROW = range(6)


def available() -> bool:
    """Whether this build runs the CDNA3 kernels on the CPU (built with CHIPLET_FA_EMULATE=cdna3)."""
    return hasattr(_C, "emulate")


def _module():
    if not available():
        raise RuntimeError("chiplet_fa was built without the emulated CDNA3 backend; rebuild with "
                           "CXX=clang++-19 CHIPLET_FA_EMULATE=cdna3 pip install --no-build-isolation .")
    return _C.emulate


@dataclass
class Launch:
    """What one emulated launch read: `reads` is (N, 6) int64, columns wid, xcd, region, batch,
    head, row (region indexes `regions`), by workgroup id and, within a workgroup, in the order it
    first read each row."""
    where: str
    kernel: str
    regions: List[str]
    reads: torch.Tensor

    @property
    def is_forward(self) -> bool:
        return "launch_fwd" in self.where


@contextlib.contextmanager
def trace(num_xcds: int = 8) -> Iterator[List[Launch]]:
    """Records the launches of the block: `with trace() as launches: ...`; the list is filled when
    the block ends. num_xcds: XCDs the dispatcher deals workgroups over (MI300X: 8)."""
    module = _module()
    if num_xcds < 1:
        raise ValueError(f"num_xcds must be >= 1, got {num_xcds}")
    launches: List[Launch] = []
    module.begin_trace()
    try:
        yield launches
    finally:
        launches.extend(Launch(l["where"], l["kernel"], list(l["regions"]), l["reads"])
                        for l in module.end_trace(num_xcds))


def forward_shape(q: torch.Tensor, k: torch.Tensor, causal: bool) -> Shape:
    """The L2 model's Shape for a forward call, with the emulated kernel's own tile."""
    block_m, block_n = _module().fwd_tile(q.dtype, q.shape[3])
    return Shape(batch=q.shape[0], num_q_heads=q.shape[2], seqlen_q=q.shape[1], head_dim=q.shape[3],
                 num_kv_heads=k.shape[2], seqlen_k=k.shape[1], elem_bytes=q.element_size(),
                 causal=causal, block_m=block_m, block_n=block_n)


Streams = List[List[Tuple[int, List[int]]]]


def xcd_streams(launch: Launch, shape: Shape, topology: Topology) -> Streams:
    """A forward launch's reads as the L2 simulator's streams: per XCD, per workgroup in dispatch
    order, (Q bytes read, [K/V pair keys in the order read]). A K or V row of (batch, kv_head, n)
    belongs to pair acc * num_n_blocks + n // block_n, acc = batch * num_kv_heads + kv_head, as in
    the model; the K and V tiles of one step make one pair, so repeats in a row collapse."""
    if not launch.is_forward:
        raise ValueError(f"xcd_streams: {launch.kernel} in {launch.where} is not a forward launch")
    k = shape.kwargs()
    n_blocks = -(-k["seqlen_k"] // shape.block_n)
    row_bytes = -(-shape.head_dim * shape.elem_bytes // topology.line_bytes) * topology.line_bytes
    region = {name: i for i, name in enumerate(launch.regions)}
    streams: Streams = [[] for _ in range(topology.num_domains)]
    reads = launch.reads.tolist()
    i = 0
    while i < len(reads):
        wid, xcd = reads[i][WID], reads[i][XCD]
        q_rows, pairs = 0, []
        while i < len(reads) and reads[i][WID] == wid:
            r = reads[i]
            if r[REGION] == region["q"]:
                q_rows += 1
            else:
                key = (r[BATCH] * k["num_kv_heads"] + r[HEAD]) * n_blocks + r[ROW] // shape.block_n
                if not pairs or pairs[-1] != key:
                    pairs.append(key)
            i += 1
        streams[xcd].append((q_rows * row_bytes, pairs))
    return streams


def kv_bytes_read(launch: Launch, shape: Shape, topology: Topology) -> int:
    """K and V bytes the workgroups read, row by row (the model counts whole tiles)."""
    row_bytes = -(-shape.head_dim * shape.elem_bytes // topology.line_bytes) * topology.line_bytes
    q = launch.regions.index("q")
    return int((launch.reads[:, REGION] != q).sum()) * row_bytes


@dataclass
class Comparison:
    """The emulated forward's per-XCD streams against the L2 model's for one call."""
    shape: Shape
    mapping: str
    emulated: Streams
    model: Streams
    emulated_prediction: Prediction  # the simulator replaying the emulated streams
    model_prediction: Prediction     # simulate(): the model replaying its own
    emulated_kv_bytes: int           # K/V bytes the kernel read (partial tiles: the rows that exist)
    differences: List[str] = field(default_factory=list)

    @property
    def same_streams(self) -> bool:
        return self.emulated == self.model


def compare_with_model(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                       mapping: str = "swizzled_head_first", mapping_xcds: int = 8,
                       topology: Topology = None) -> Comparison:
    """Runs the emulated forward on (q, k, v) under `mapping` (computed for mapping_xcds XCDs)
    with the dispatcher dealing over topology.num_domains XCDs (default: the mi300x preset), and
    compares what each XCD read with the model's trace of the same shape."""
    topology = topology or preset("mi300x")
    with trace(topology.num_domains) as launches:
        torch.ops.chiplet_fa.fwd(q, k, v, None, causal, mapping, mapping_xcds)
    forward = [l for l in launches if l.is_forward]
    if len(forward) != 1:
        raise RuntimeError(f"compare_with_model: expected one emulated forward launch, got {len(forward)} "
                           "(float16/bfloat16 inputs with a head dim the cdna3 kernels cover run emulated)")
    shape = forward_shape(q, k, causal)
    emulated = xcd_streams(forward[0], shape, topology)
    model = [[(q_bytes, list(pairs)) for q_bytes, pairs in domain]
             for domain in _C.locality.model_streams(topology, **shape.kwargs(), mapping=mapping,
                                                     mapping_xcds=mapping_xcds)]
    result = Comparison(
        shape, mapping, emulated, model,
        Prediction(**_C.locality.simulate_streams(topology, **shape.kwargs(), streams=emulated)),
        simulate(topology, shape, mapping, mapping_xcds), kv_bytes_read(forward[0], shape, topology))
    result.differences = _differences(emulated, model)
    return result


def _differences(emulated: Streams, model: Streams) -> List[str]:
    found = []
    for x, (e, m) in enumerate(zip(emulated, model)):
        if len(e) != len(m):
            found.append(f"XCD {x}: {len(e)} workgroups emulated, {len(m)} in the model")
        elif {p for _, ps in e for p in ps} != {p for _, ps in m for p in ps}:
            found.append(f"XCD {x}: different K/V tile sets")
        elif e != m:
            found.append(f"XCD {x}: same tiles, different order or Q bytes")
    return found


def per_xcd_tiles(streams: Streams) -> Dict[int, set]:
    """XCD -> the set of K/V pair keys its workgroups read."""
    return {x: {p for _, pairs in domain for p in pairs} for x, domain in enumerate(streams)}
