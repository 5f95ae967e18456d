"""Fast GPU correctness sweep for iterating on kernels (the full suite is tests/, -m gpu).

Compares forward outputs (every mapping, causal or not, several shapes and head dims) and
backward gradients (GQA, N_q != N_k, head dims off the tile sizes, atomic and deterministic dQ)
with fp64 references under flash-attention's rule; prints one line per case and exits non-zero
on any failure. Cases a reduced build (CHIPLET_FA_DTYPES / CHIPLET_FA_HDIMS) has no kernel for are
left out, and the count of those is printed.
"""
import functools
import itertools
import sys
from pathlib import Path

import torch

import chiplet_fa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _bwd_reference import attention_grads_ref  # noqa: E402
from _bwd_reference import attention_ref as diff_ref  # noqa: E402
from reference import attention_ref, varlen_ref  # noqa: E402  (the tests' fp64 reference)

DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16"}
SKIPPED = []


@functools.lru_cache
def family_kernels():
    """{kind: {dtypes, head_dims}} of the family this device runs."""
    return chiplet_fa.build_info()["kernels"].get(chiplet_fa.kernel_path().split()[0], {})


def built(kind, dtype, head_dim):
    """Whether the family this device runs has a `kind` kernel covering (dtype, head_dim)."""
    have = family_kernels().get(kind)
    if kind == "bwd" and have and head_dim > max(have["head_dims"]) and "sm90" in chiplet_fa.kernel_path():
        # sm90 hands wider backward head dims to mma_sync (ops/kernel_binding.h: bwd_family).
        have = chiplet_fa.build_info()["kernels"].get("mma_sync", {}).get("bwd")
    ok = bool(have) and DTYPE_NAMES[dtype] in have["dtypes"] and head_dim <= max(have["head_dims"])
    if not ok:
        SKIPPED.append((kind, dtype, head_dim))
    return ok


def forward_cases():
    fails = 0
    cases = itertools.product(
        [(2, 200, 333, 4, 2), (1, 1, 77, 8, 8), (1, 300, 128, 6, 1), (3, 129, 129, 4, 4)],
        [torch.bfloat16, torch.float16], [64, 128, 56, 20, 256, 96], [False, True],
        ["block_first", "head_first", "swizzled_block_first", "swizzled_head_first"])
    for (b, nq, nk, hq, hkv), dtype, d, causal, mapping in cases:
        if not built("fwd", dtype, d):
            continue
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
        masked_ok = bool((lse[~finite] == float("-inf")).all()) and not out.isnan().any()
        ok = err <= 2 * base + 1e-3 and lse_err < 1e-2 and masked_ok
        fails += not ok
        if not ok or mapping == "head_first":
            print(f"{'ok ' if ok else 'FAIL'} b{b} nq{nq} nk{nk} h{hq}/{hkv} d{d} {str(dtype)[6:]} "
                  f"causal={causal} {mapping}: err {err:.2e} (torch {base:.2e}) lse {lse_err:.1e}", flush=True)
    return fails


def backward_cases():
    fails = 0
    cases = itertools.product(
        [(2, 200, 333, 4, 2), (1, 300, 128, 6, 1), (3, 129, 129, 4, 4), (1, 1000, 1000, 2, 2)],
        [torch.bfloat16, torch.float16], [128, 64, 96, 32, 56, 20, 256, 160], [False, True], [False, True])
    for (b, nq, nk, hq, hkv), dtype, d, causal, deterministic in cases:
        if not built("bwd", dtype, d):
            continue
        q = torch.randn(b, nq, hq, d, device="cuda", dtype=dtype)
        k = torch.randn(b, nk, hkv, d, device="cuda", dtype=dtype)
        v = torch.randn(b, nk, hkv, d, device="cuda", dtype=dtype)
        dout = torch.randn_like(q)
        out, lse = torch.ops.chiplet_fa.fwd(q, k, v, None, causal, "swizzled_head_first", 8)
        grads = torch.ops.chiplet_fa.bwd(dout, q, k, v, out, lse, None, causal, "swizzled_head_first", 8,
                                         deterministic)
        torch.cuda.synchronize()
        ref = attention_grads_ref(q, k, v, dout, causal, dtype=torch.float64)
        low = attention_grads_ref(q, k, v, dout, causal)
        errs = [(g.double() - r).abs().max().item() for g, r in zip(grads, ref)]
        bases = [(g.double() - r).abs().max().item() for g, r in zip(low, ref)]
        ok = all(e <= 2 * base + 1e-3 for e, base in zip(errs, bases))
        fails += not ok
        if not ok or (d in (128, 56, 256) and dtype == torch.bfloat16):
            print(f"{'ok ' if ok else 'FAIL'} bwd b{b} nq{nq} nk{nk} h{hq}/{hkv} d{d} {str(dtype)[6:]} "
                  f"causal={causal} det={deterministic}: dq/dk/dv err "
                  + " ".join(f"{e:.1e}({base:.1e})" for e, base in zip(errs, bases)), flush=True)
    return fails


MASKS = [dict(causal=True, window=(64, 0)), dict(causal=False, window=(32, 16)), dict(softcap=30.0),
         dict(causal=True, softcap=5.0, alibi="head"), dict(causal=False, alibi="batch")]


def masked_packed_cases():
    """Windows, softcap and ALiBi on a dense and a packed batch, forward and backward."""
    fails = 0
    lens_q, lens_k = [200, 0, 333, 1, 129], [150, 7, 333, 64, 300]
    cu_q, cu_k = (torch.tensor([0] + list(itertools.accumulate(lens)), dtype=torch.int32, device="cuda")
                  for lens in (lens_q, lens_k))
    for mask, dtype, d in itertools.product(MASKS, [torch.bfloat16, torch.float16], [64, 128, 56, 256]):
        if not built("fwd", dtype, d) or not built("bwd", dtype, d):
            continue
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
        ok = err <= 2 * base + 1e-3 and all(e <= 2 * b + 2e-3 for e, b in zip(gerr, gbase))
        fails += not ok
        print(f"{'ok ' if ok else 'FAIL'} packed {mask} d{d} {str(dtype)[6:]}: out err {err:.1e} (torch {base:.1e}) "
              + "dq/dk/dv " + " ".join(f"{e:.1e}({b:.1e})" for e, b in zip(gerr, gbase)), flush=True)
    return fails


def main():
    fwd_fails = forward_cases()
    bwd_fails = backward_cases() + masked_packed_cases()
    print(f"gpu_smoke ({chiplet_fa.kernel_path()}): {fwd_fails} forward failures, {bwd_fails} backward failures, "
          f"{len(SKIPPED)} cases left out (not in this build)")
    sys.exit(1 if fwd_fails + bwd_fails else 0)


if __name__ == "__main__":
    main()
