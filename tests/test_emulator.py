"""The emulated CDNA3 backend itself (builds with CHIPLET_FA_EMULATE=cdna3): the MFMA builtins
against a matmul with operands laid out as AMD documents them, the cross-lane operations, barriers
and LDS, the errors for kernels that break the rules, and what the build reports.

The operand layout here is written from AMD's Matrix Instruction Calculator
(github.com/ROCm/amd_matrix_instruction_calculator, `--architecture cdna3 --instruction
v_mfma_f32_16x16x16_f16 --detail-instruction`), independently of arch/cdna3.h and of
tests/test_mfma_layout.py (which models cdna3.h's own algebra).
"""
import contextlib

import numpy as np
import pytest
import torch

import chiplet_fa
from devices import EMULATED, needs_emulation

pytestmark = pytest.mark.emulated  # each test that needs the emulator also skips without it
LANE = np.arange(64)


def a_index(lane, e):
    """A[i][k] held by `lane`, vector element e (GPR e // 2, half e % 2): i = l % 16, k = 4 (l / 16) + e."""
    return lane % 16, 4 * (lane // 16) + e


def b_index(lane, e):
    """B[k][j]: k = 4 (l / 16) + e, j = l % 16."""
    return 4 * (lane // 16) + e, lane % 16


def cd_index(lane, e):
    """C[i][j] and D[i][j], GPR e: i = 4 (l / 16) + e, j = l % 16."""
    return 4 * (lane // 16) + e, lane % 16


def gather(matrix, index):
    """(64, 4) per-lane registers of a 16x16 matrix under a layout."""
    return np.stack([matrix[index(LANE, e)] for e in range(4)], axis=1)


def scatter(lanes, index):
    out = np.full((16, 16), np.nan)
    for e in range(4):
        out[index(LANE, e)] = lanes[:, e]
    return out


def raw16(x, dtype):
    """Values as the raw 16-bit patterns the builtin takes (int16 tensor)."""
    return torch.from_numpy(np.ascontiguousarray(x)).to(dtype).view(torch.int16)


def run_mfma(A, B, C, dtype, a_layout=a_index, b_layout=b_index):
    d = chiplet_fa._C.emulate.mfma("f16" if dtype == torch.float16 else "bf16",
                                   raw16(gather(A, a_layout), dtype), raw16(gather(B, b_layout), dtype),
                                   torch.from_numpy(gather(C, cd_index).astype(np.float32)))
    return scatter(d.double().numpy(), cd_index)


def operands(dtype, seed):
    rng = np.random.default_rng(seed)
    # Exactly representable in the input type, so A B + C in fp64 is the exact product.
    A, B = (torch.from_numpy(rng.standard_normal((16, 16))).to(dtype).double().numpy() for _ in range(2))
    C = rng.standard_normal((16, 16)).astype(np.float32).astype(np.float64)
    return A, B, C


@needs_emulation
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("seed", range(3))
def test_mfma_computes_a_b_plus_c_in_the_isa_layout(dtype, seed):
    A, B, C = operands(dtype, seed)
    np.testing.assert_allclose(run_mfma(A, B, C, dtype), A @ B + C, rtol=1e-6, atol=1e-6)


@needs_emulation
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_mfma_disagrees_with_a_transposed_operand_layout(dtype):
    # The check is sensitive: A passed in B's layout (i.e. transposed) is a different product.
    A, B, C = operands(dtype, 7)
    got = run_mfma(A, B, C, dtype, a_layout=lambda l, e: a_index(l, e)[::-1])
    assert not np.allclose(got, A @ B + C, atol=1e-3)


@needs_emulation
def test_mfma_f16_takes_subnormals_and_gives_infinities():
    A, B, C = (np.zeros((16, 16)) for _ in range(3))
    A[0, 0], B[0, 0] = 2.0 ** -20, 2.0 ** 10  # a subnormal fp16 input
    A[1, 1], B[1, 1] = 60000.0, 60000.0       # near fp16's largest: the product is exact in fp32
    C[2, 2] = np.inf
    D = run_mfma(A, B, C, torch.float16)
    assert D[0, 0] == 2.0 ** -10 and D[1, 1] == 3.6e9 and D[2, 2] == np.inf


@needs_emulation
@pytest.mark.parametrize("threads, mask, width", [(64, 16, 64), (128, 32, 64), (64, 1, 8), (64, 8, 8), (256, 63, 64)])
def test_shfl_xor(threads, mask, width):
    values = torch.arange(threads, dtype=torch.float32)
    lane = np.arange(threads) % 64
    src = lane ^ mask
    segment_end = (lane + width) & ~(width - 1)
    src = np.where(src >= segment_end, lane, src) + np.arange(threads) // 64 * 64
    assert torch.equal(chiplet_fa._C.emulate.shfl_xor(values, mask, width), values[torch.from_numpy(src)])


@needs_emulation
def test_any_is_per_wave():
    predicates = torch.zeros(192, dtype=torch.int32)
    predicates[70] = 1  # wave 1 only
    got = chiplet_fa._C.emulate.any(predicates)
    assert (got[64:128] == 1).all() and (got[:64] == 0).all() and (got[128:] == 0).all()


@needs_emulation
@pytest.mark.parametrize("threads, shift", [(256, 64), (256, 1), (1024, 513), (96, 50)])
def test_barrier_makes_lds_writes_visible_across_waves(threads, shift):
    rounds = 3
    got = chiplet_fa._C.emulate.barrier_exchange(threads, shift, rounds)
    t = torch.arange(threads)
    want = torch.stack([1000 * r + (t + shift) % threads for r in range(rounds)]).int()
    assert torch.equal(got, want)


@contextlib.contextmanager
def schedule(order):
    chiplet_fa._C.emulate.set_schedule(order)
    try:
        yield
    finally:
        chiplet_fa._C.emulate.set_schedule("ascending")


@needs_emulation
def test_the_schedule_order_exposes_a_missing_barrier():
    runs = {}
    for order in ("ascending", "descending", "shuffled"):
        with schedule(order):
            runs[order] = (chiplet_fa._C.emulate.barrier_exchange(256, 64, 2, barriers=True),
                           chiplet_fa._C.emulate.barrier_exchange(256, 64, 2, barriers=False))
    assert all(torch.equal(r[0], runs["ascending"][0]) for r in runs.values())
    assert not torch.equal(runs["ascending"][1], runs["descending"][1])


@needs_emulation
@pytest.mark.parametrize("head_dim", [32, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_kernels_do_not_depend_on_the_schedule(head_dim, causal):
    # No LDS read the kernels make races with a write: every order gives the same bits (the
    # deterministic backward: the atomic one sums dQ in schedule order).
    gen = torch.Generator().manual_seed(head_dim)
    q, dout = (torch.randn(1, 150, 4, head_dim, generator=gen).half() for _ in range(2))
    k, v = (torch.randn(1, 100, 2, head_dim, generator=gen).half() for _ in range(2))
    runs = []
    for order in ("ascending", "descending", "shuffled"):
        with schedule(order):
            out, lse = torch.ops.chiplet_fa.fwd(q, k, v, None, causal, "swizzled_head_first", 3)
            grads = torch.ops.chiplet_fa.bwd(dout, q, k, v, out, lse, None, causal, "swizzled_head_first", 3, True)
            runs.append((out, lse, *grads))
    for run in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(runs[0], run))


@needs_emulation
def test_lds_nobody_wrote_reads_as_nan():
    assert np.isnan(chiplet_fa._C.emulate.unwritten_lds())


@needs_emulation
@pytest.mark.parametrize("which, message", [
    ("early_return", r"deadlock.*threads 0-63: waits at __syncthreads number 1; threads 64-127: returned"),
    ("extra_barrier", r"deadlock.*thread 5: waits at __syncthreads number 2"),
    ("divergent_wave_op", r"lanes of one wave reached different wave operations: this lane __shfl_xor"),
    ("divergent_call_site", r"different wave operations: this lane __shfl_xor at .*selftest.cpp:\d+, 32 lane"),
    ("misaligned_read", r"16-byte global read at 0x[0-9a-f]+ is not 16-byte aligned"),
    ("partial_wave_mfma", r"mfma_f32_16x16x16f16 in a partial wave"),
    ("lds_overrun", r"wrote LDS byte 256, past the 256 bytes the launch allocated"),
])
def test_broken_kernels_raise_instead_of_hanging(which, message):
    with pytest.raises(RuntimeError, match=message):
        chiplet_fa._C.emulate.broken(which)
    # The runner is usable after an abandoned workgroup.
    assert torch.equal(chiplet_fa._C.emulate.any(torch.ones(64, dtype=torch.int32)), torch.ones(64, dtype=torch.int32))


@needs_emulation
@pytest.mark.parametrize("dtype, head_dim, emulated", [
    (torch.float16, 64, True), (torch.bfloat16, 100, True), (torch.float32, 64, False), (torch.float16, 136, True),
])
def test_the_op_routes_half_types_with_a_cdna3_head_dim_to_the_emulator(dtype, head_dim, emulated):
    q = torch.randn(1, 20, 2, head_dim, dtype=dtype)
    with chiplet_fa.emulate.trace() as launches:
        torch.ops.chiplet_fa.fwd(q, q, q)
    assert [l.is_forward for l in launches] == ([True] if emulated else [])
    if emulated:
        assert launches[0].regions == ["q", "k", "v"] and "launch_fwd" in launches[0].where


@needs_emulation
@pytest.mark.parametrize("head_dim", [64, 256])
def test_explain_models_the_rows_an_emulated_workgroup_reads(head_dim):
    # explain() sizes the L2 model's tiles as the op's kernel does: 128 rows at D=64, 64 at D=256.
    q, k, v = (torch.randn(1, 300, 2, head_dim, dtype=torch.float16) for _ in range(3))
    with chiplet_fa.emulate.trace() as launches:
        torch.ops.chiplet_fa.fwd(q, k, v)
    reads = launches[0].reads
    first = reads[(reads[:, 0] == 0) & (reads[:, 2] == launches[0].regions.index("q"))]
    rows = len(first[:, 5].unique())
    assert rows == (128 if head_dim <= 128 else 64)
    assert chiplet_fa.explain(q, k, v, file=False)["shape"].block_m == rows
    assert chiplet_fa.explain(q.float(), k.float(), v.float(), file=False)["shape"].block_m == 64  # the CPU kernel's


@needs_emulation
def test_one_trace_session_at_a_time():
    with chiplet_fa.emulate.trace():
        with pytest.raises(RuntimeError, match="already open"):
            chiplet_fa._C.emulate.begin_trace()


def test_build_info_says_whether_the_emulator_is_built():
    info = chiplet_fa.build_info()
    assert chiplet_fa.emulate.available() == EMULATED == hasattr(chiplet_fa._C, "emulate")
    if not EMULATED:
        assert "emulating" not in info["backend"] and chiplet_fa.kernel_path("cpu") == "cpu"
        return
    assert info["backend"] == "cpu (emulating cdna3)" and "cdna3, emulated" in chiplet_fa.kernel_path("cpu")
    assert info["kernels"]["cdna3"]["fwd"]["dtypes"] == ["bf16", "fp16"]
    assert info["kernels"]["cdna3"]["bwd"]["head_dims"] == [32, 64, 96, 128, 192, 256]
    assert "Clang" in info["cxx_compiler"]
