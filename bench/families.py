"""Each kernel family of the installed chiplet_fa against torch SDPA, one process: what a default
install runs (the family chosen at run time) next to the other family in the same library
(CHIPLET_FA_KERNEL forces it per call) and SDPA's flash and cuDNN backends.

  python bench/families.py --out bench/results
Writes families_<gpu>.md and .json. bf16, head_first mapping; causal FLOPs halved, backward FLOPs
2.5x forward.
"""
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import attention_flops, fmt, gpu_bench_args, save_results, time_ms  # noqa: E402

import chiplet_fa  # noqa: E402

FAMILIES = ("auto", "mma_sync")  # auto: the family a default call runs on this device
SDPA = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
# (B, H_q, H_kv, N, D, causal): the reference point (B1 H128 N8K D128) and two more.
SHAPES = [(1, 128, 128, 8192, 128, False), (1, 32, 32, 16384, 128, True), (4, 32, 8, 4096, 128, True)]


def family_env(name):
    """Sets CHIPLET_FA_KERNEL for the following calls (auto: unset)."""
    if name == "auto":
        os.environ.pop("CHIPLET_FA_KERNEL", None)
    else:
        os.environ["CHIPLET_FA_KERNEL"] = name


def run_shape(b, hq, hkv, n, d, causal):
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, dout = (torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16, generator=gen)
                     for h in (hq, hkv, hkv, hq))
    flops = attention_flops(b, hq, n, n, d, causal)
    row = {"B": b, "H_q": hq, "H_kv": hkv, "N": n, "D": d, "causal": causal}
    ops = torch.ops.chiplet_fa
    for fam in FAMILIES:
        family_env(fam)
        out, lse = ops.fwd(q, k, v, None, causal, "head_first", -1)
        row[f"{fam}_fwd"] = flops / time_ms(lambda: ops.fwd(q, k, v, None, causal, "head_first", -1)) / 1e9
        row[f"{fam}_bwd"] = 2.5 * flops / time_ms(
            lambda: ops.bwd(dout, q, k, v, out, lse, None, causal, "head_first", -1, False)) / 1e9
    family_env("auto")
    row["auto_family"] = chiplet_fa.kernel_path(q.device)
    # K/V expanded for GQA: not every SDPA backend takes enable_gqa.
    qt, kt, vt, dot = (t.transpose(1, 2) for t in (q, k.repeat_interleave(hq // hkv, 2),
                                                   v.repeat_interleave(hq // hkv, 2), dout))
    for name, backend in SDPA.items():
        with sdpa_kernel(backend):
            leaves = [t.detach().requires_grad_() for t in (qt, kt, vt)]
            fwd = lambda: F.scaled_dot_product_attention(*leaves, is_causal=causal)  # noqa: E731
            row[f"{name}_fwd"] = flops / time_ms(fwd) / 1e9
            o = fwd()
            row[f"{name}_bwd"] = 2.5 * flops / time_ms(
                lambda: torch.autograd.grad(o, leaves, dot, retain_graph=True)) / 1e9
    return row


def markdown(rows, gpu, command):
    cols = [f"{f}_{k}" for k in ("fwd", "bwd") for f in FAMILIES + tuple(SDPA)]
    lines = [f"# chiplet_fa kernel families, {gpu}, bf16, head_first (TFLOP/s, median)", "",
             f"Command: `{command}`", f"auto runs: {rows[0]['auto_family'] if rows else '-'}", "",
             "| B | H_q | H_kv | N | D | causal | " + " | ".join(cols)
             + " | auto / mma_sync fwd | auto / cuDNN fwd | auto / cuDNN bwd |",
             "|" + "---|" * (9 + len(cols))]
    for r in rows:
        lines.append(f"| {r['B']} | {r['H_q']} | {r['H_kv']} | {r['N']} | {r['D']} | "
                     f"{'yes' if r['causal'] else 'no'} | " + " | ".join(fmt(r[c]) for c in cols)
                     + f" | {r['auto_fwd'] / r['mma_sync_fwd']:.2f} | {r['auto_fwd'] / r['cudnn_fwd']:.2f}"
                     f" | {r['auto_bwd'] / r['cudnn_bwd']:.2f} |")
    return "\n".join(lines) + "\n"


def main():
    args = gpu_bench_args(__doc__)
    rows = []
    for shape in SHAPES:
        rows.append(run_shape(*shape))
        torch.cuda.empty_cache()
        print(shape, {k: fmt(v) if isinstance(v, float) else v for k, v in rows[-1].items()
                      if k.endswith(("fwd", "bwd"))}, flush=True)
    md, _ = save_results(args.out, "families", rows, markdown)
    print(md)


if __name__ == "__main__":
    main()
