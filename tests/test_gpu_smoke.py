"""The smoke sweep: a fast GPU correctness check for iterating on kernels (tools/device/device_run.sh
runs it as its `smoke` and `mma_sync` stages, tools/device/ab_run.sh on each variant; the full GPU
suite is `-m gpu`). Marked `smoke`, not `gpu`, so the GPU suite does not run it twice.

Forward outputs (every mapping, causal or not, several shapes and head dims), backward gradients
(GQA, N_q != N_k, head dims off the tile sizes, atomic and deterministic dQ) and masked packed
batches, against fp64 references under flash-attention's rule. Cases a reduced build
(CHIPLET_FA_DTYPES / CHIPLET_FA_HDIMS) has no kernel for are skipped."""
import itertools
import sys
from pathlib import Path

import pytest
import torch

from _bwd_reference import attention_grads_ref
from _bwd_reference import attention_ref as diff_ref
from devices import needs_cuda
from reference import attention_ref, varlen_ref

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools" / "device"))
from build_coverage import built  # noqa: E402

pytestmark = [pytest.mark.smoke, needs_cuda]
DTYPES = [torch.bfloat16, torch.float16]
MAPPINGS = ["block_first", "head_first", "swizzled_block_first", "swizzled_head_first"]


def skip_unless_built(*kinds, dtype, head_dim):
    if not all(built(kind, dtype, head_dim) for kind in kinds):
        pytest.skip(f"{'/'.join(kinds)} {dtype} D={head_dim}: not in this build")


@pytest.mark.parametrize("mapping", MAPPINGS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 128, 56, 20, 256, 96])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("b, nq, nk, hq, hkv", [(2, 200, 333, 4, 2), (1, 1, 77, 8, 8), (1, 300, 128, 6, 1),
                                                (3, 129, 129, 4, 4)])
def test_forward(b, nq, nk, hq, hkv, dtype, d, causal, mapping):
    skip_unless_built("fwd", dtype=dtype, head_dim=d)
    q = torch.randn(b, nq, hq, d, device="cuda", dtype=dtype)
    k = torch.randn(b, nk, hkv, d, device="cuda", dtype=dtype)
    v = torch.randn(b, nk, hkv, d, device="cuda", dtype=dtype)
    out, lse = torch.ops.chiplet_fa.fwd(q, k, v, None, causal, mapping, 8)
    torch.cuda.synchronize()
    ref, ref_lse = attention_ref(q, k, v, causal)
    err = (out.double() - ref).abs().max().item()
    base = (attention_ref(q, k, v, causal, dtype=dtype)[0].double() - ref).abs().max().item()
    finite = torch.isfinite(ref_lse)
    lse_err = (lse.double()[finite] - ref_lse[finite]).abs().max().item() if finite.any() else 0.0
    assert err <= 2 * base + 1e-3, f"out err {err:.2e} (torch {base:.2e})"
    assert lse_err < 1e-2, f"lse err {lse_err:.1e}"
    assert bool((lse[~finite] == float("-inf")).all()) and not out.isnan().any(), "fully masked rows"


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [128, 64, 96, 32, 56, 20, 256, 160])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("b, nq, nk, hq, hkv", [(2, 200, 333, 4, 2), (1, 300, 128, 6, 1), (3, 129, 129, 4, 4),
                                                (1, 1000, 1000, 2, 2)])
def test_backward(b, nq, nk, hq, hkv, dtype, d, causal, deterministic):
    skip_unless_built("bwd", dtype=dtype, head_dim=d)
    q = torch.randn(b, nq, hq, d, device="cuda", dtype=dtype)
    k = torch.randn(b, nk, hkv, d, device="cuda", dtype=dtype)
    v = torch.randn(b, nk, hkv, d, device="cuda", dtype=dtype)
    dout = torch.randn_like(q)
    out, lse = torch.ops.chiplet_fa.fwd(q, k, v, None, causal, "swizzled_head_first", 8)
    grads = torch.ops.chiplet_fa.bwd(dout, q, k, v, out, lse, None, causal, "swizzled_head_first", 8, deterministic)
    torch.cuda.synchronize()
    ref = attention_grads_ref(q, k, v, dout, causal, dtype=torch.float64)
    low = attention_grads_ref(q, k, v, dout, causal)
    errs = [(g.double() - r).abs().max().item() for g, r in zip(grads, ref)]
    bases = [(g.double() - r).abs().max().item() for g, r in zip(low, ref)]
    assert all(e <= 2 * base + 1e-3 for e, base in zip(errs, bases)), \
        "dq/dk/dv err " + " ".join(f"{e:.1e}({base:.1e})" for e, base in zip(errs, bases))


MASKS = [dict(causal=True, window=(64, 0)), dict(causal=False, window=(32, 16)), dict(softcap=30.0),
         dict(causal=True, softcap=5.0, alibi="head"), dict(causal=False, alibi="batch")]


@pytest.mark.parametrize("d", [64, 128, 56, 256])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask", MASKS, ids=str)
def test_masked_packed(mask, dtype, d):
    """Windows, softcap and ALiBi on a packed batch, forward and backward."""
    skip_unless_built("fwd", "bwd", dtype=dtype, head_dim=d)
    lens_q, lens_k = [200, 0, 333, 1, 129], [150, 7, 333, 64, 300]
    cu_q, cu_k = (torch.tensor([0] + list(itertools.accumulate(lens)), dtype=torch.int32, device="cuda")
                  for lens in (lens_q, lens_k))
    causal, window, softcap = mask.get("causal", False), mask.get("window", (-1, -1)), mask.get("softcap", 0.0)
    hq, hkv = 6, 2
    slopes = {"head": torch.rand(hq) * 0.2, "batch": torch.rand(len(lens_q), hq) * 0.2}.get(mask.get("alibi"))
    ops_kw = dict(causal=causal, window_left=window[0], window_right=window[1], softcap=softcap,
                  alibi_slopes=None if slopes is None else slopes.cuda())
    ref_kw = dict(causal=causal, window=window, softcap=softcap, alibi_slopes=slopes)
    q, dout = (torch.randn(sum(lens_q), hq, d, device="cuda", dtype=dtype) for _ in range(2))
    k, v = (torch.randn(sum(lens_k), hkv, d, device="cuda", dtype=dtype) for _ in range(2))
    out, lse = torch.ops.chiplet_fa.fwd_varlen(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), **ops_kw)
    grads = torch.ops.chiplet_fa.bwd_varlen(dout, q, k, v, out, lse, cu_q, cu_k, max(lens_q), max(lens_k), **ops_kw)
    torch.cuda.synchronize()
    args = [t.cpu() for t in (q, k, v, cu_q, cu_k)]
    ref = varlen_ref(*args, **ref_kw)[0]
    base = (varlen_ref(*args, dtype=dtype, **ref_kw)[0] - ref).abs().max().item()
    err = (out.double().cpu() - ref).abs().max().item()

    def packed_grads(dt):
        leaves = [x.detach().cpu().to(dt).requires_grad_() for x in (q, k, v)]
        o = varlen_ref(*leaves, cu_q.cpu(), cu_k.cpu(), reference=diff_ref, **ref_kw)
        return torch.autograd.grad(o, leaves, dout.cpu().to(dt))
    gref, glow = packed_grads(torch.float64), packed_grads(dtype)
    gerr = [(g.double().cpu() - r).abs().max().item() for g, r in zip(grads, gref)]
    gbase = [(g.double() - r).abs().max().item() for g, r in zip(glow, gref)]
    assert err <= 2 * base + 1e-3, f"out err {err:.1e} (torch {base:.1e})"
    assert all(e <= 2 * b + 2e-3 for e, b in zip(gerr, gbase)), \
        "dq/dk/dv err " + " ".join(f"{e:.1e}({b:.1e})" for e, b in zip(gerr, gbase))
