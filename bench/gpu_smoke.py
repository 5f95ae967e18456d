"""Fast GPU correctness sweep for iterating on kernels (the full suite is tests/, -m gpu).

Compares every mapping, causal or not, several shapes and head dims with an fp64 reference
under flash-attention's rule; prints one line per case and exits non-zero on any failure.
"""
import itertools
import sys
from pathlib import Path

import torch

import chiplet_fa  # noqa: F401

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from reference import attention_ref  # noqa: E402  (the tests' fp64 reference)


def main():
    fails = 0
    cases = itertools.product(
        [(2, 200, 333, 4, 2), (1, 1, 77, 8, 8), (1, 300, 128, 6, 1), (3, 129, 129, 4, 4)],
        [torch.bfloat16, torch.float16], [64, 128, 56, 20, 256, 96], [False, True],
        ["block_first", "head_first", "swizzled_block_first", "swizzled_head_first"])
    for (b, nq, nk, hq, hkv), dtype, d, causal, mapping in cases:
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
    print(f"gpu_smoke: {fails} failures")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
