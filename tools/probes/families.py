"""Each kernel family of the installed chiplet_fa against torch SDPA, one process: what a default
install runs (the family chosen at run time) next to the other family in the same library
(CHIPLET_FA_KERNEL forces it per call) and SDPA's flash and cuDNN backends.

  python tools/probes/families.py --out DIR
Writes families_<gpu>.json and families.md. bf16, head_first mapping; causal FLOPs halved, backward FLOPs
2.5x forward.
"""
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import harness  # noqa: E402
from harness import attention_flops, fmt, time_ms  # noqa: E402

import chiplet_fa  # noqa: E402

FAMILIES = ("auto", "mma_sync")  # auto: the family a default call runs on this device
PEERS = ("sdpa_flash", "sdpa_cudnn")
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
    leaves = [t.detach().requires_grad_() for t in harness.sdpa_views(q, k, v, expand_kv=True)]
    dot = dout.transpose(1, 2)
    for peer in PEERS:
        fwd = lambda peer=peer: harness.sdpa(peer, *leaves, causal)  # noqa: E731
        row[f"{peer}_fwd"] = flops / time_ms(fwd) / 1e9
        o = fwd()
        row[f"{peer}_bwd"] = 2.5 * flops / time_ms(lambda: torch.autograd.grad(o, leaves, dot, retain_graph=True)) / 1e9
    return row


def markdown(result):
    rows = result["rows"]
    cols = [f"{f}_{k}" for k in ("fwd", "bwd") for f in FAMILIES + PEERS]
    lines = [f"# chiplet_fa kernel families, {result['gpu']}, bf16, head_first (TFLOP/s, median)", "",
             *harness.header_lines(result), f"auto runs: {rows[0]['auto_family'] if rows else '-'}", "",
             "| B | H_q | H_kv | N | D | causal | " + " | ".join(cols)
             + " | auto / mma_sync fwd | auto / cuDNN fwd | auto / cuDNN bwd |",
             "|" + "---|" * (9 + len(cols))]
    for r in rows:
        lines.append(f"| {r['B']} | {r['H_q']} | {r['H_kv']} | {r['N']} | {r['D']} | "
                     f"{'yes' if r['causal'] else 'no'} | " + " | ".join(fmt(r[c]) for c in cols)
                     + f" | {r['auto_fwd'] / r['mma_sync_fwd']:.2f} | {r['auto_fwd'] / r['sdpa_cudnn_fwd']:.2f}"
                     f" | {r['auto_bwd'] / r['sdpa_cudnn_bwd']:.2f} |")
    return "\n".join(lines) + "\n"


def main():
    args = harness.gpu_bench_args(__doc__)
    result = harness.result_header("families")
    rows = []
    for shape in SHAPES:
        rows.append(run_shape(*shape))
        torch.cuda.empty_cache()
        print(shape, {k: fmt(v) if isinstance(v, float) else v for k, v in rows[-1].items()
                      if k.endswith(("fwd", "bwd"))}, flush=True)
    print(harness.save_results(args.out, dict(result, rows=rows), markdown))


if __name__ == "__main__":
    main()
