"""GPU time per kernel of one call, chiplet_fa's and cuDNN's (torch.profiler): where a call's time
goes besides its main kernel (fills, the backward's preprocess and dQ conversion, copies), which
the TFLOP/s tables of bwd.py and fwd.py cannot say.

  python bench/kernel_times.py --shapes 8,16,16,2048,64 --causal yes --out /tmp/r
Writes kernel_times_<gpu>.md and .json: for each shape and call, each kernel's mean time per call
and its share of the call's summed kernel time.
"""
import argparse
import sys
from collections import defaultdict
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import save_results  # noqa: E402

import chiplet_fa  # noqa: E402,F401  (registers the operators)

CALLS = 20


def kernel_times(fn):
    """{kernel name: mean us per call} over CALLS calls after a warm-up."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            fn()
        torch.cuda.synchronize()
    total = defaultdict(float)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            total[e.name] += e.time_range.elapsed_us()
    return {name: us / CALLS for name, us in total.items()}


def calls(b, hq, hkv, n, d, causal):
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16, generator=gen) for h in (hq, hkv, hkv))
    dout = torch.randn_like(q)
    ops = torch.ops.chiplet_fa
    out, lse = ops.fwd(q, k, v, None, causal, "head_first", -1)
    leaves = [t.transpose(1, 2).detach().requires_grad_() for t in (q, k, v)]
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        ref = F.scaled_dot_product_attention(*leaves, is_causal=causal, enable_gqa=hq != hkv)

    def cudnn_fwd():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION), torch.no_grad():
            F.scaled_dot_product_attention(*leaves, is_causal=causal, enable_gqa=hq != hkv)

    return {
        "fwd": lambda: ops.fwd(q, k, v, None, causal, "head_first", -1),
        "cudnn fwd": cudnn_fwd,
        "bwd": lambda: ops.bwd(dout, q, k, v, out, lse, None, causal, "head_first", -1, False),
        "bwd det": lambda: ops.bwd(dout, q, k, v, out, lse, None, causal, "head_first", -1, True),
        "cudnn bwd": lambda: torch.autograd.grad(ref, leaves, dout.transpose(1, 2), retain_graph=True),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", nargs="+", required=True, help="B,H_q,H_kv,N,D ...")
    ap.add_argument("--causal", choices=("no", "yes", "both"), default="both")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    rows, lines = [], []
    for shape in args.shapes:
        b, hq, hkv, n, d = (int(x) for x in shape.split(","))
        for causal in {"no": [False], "yes": [True], "both": [False, True]}[args.causal]:
            for call, fn in calls(b, hq, hkv, n, d, causal).items():
                times = kernel_times(fn)
                total = sum(times.values())
                lines.append(f"\n{b}x{hq}/{hkv} N={n} D={d} causal={causal} {call}: {total:.1f} us of kernels a call\n")
                lines.append("| kernel | us | share |\n|---|---|---|")
                for name, us in sorted(times.items(), key=lambda x: -x[1]):
                    lines.append(f"| `{name[:110]}` | {us:.1f} | {us / total:.1%} |")
                    rows.append({"B": b, "H_q": hq, "H_kv": hkv, "N": n, "D": d, "causal": causal, "call": call,
                                 "kernel": name, "us": us})
    md, _ = save_results(args.out, "kernel_times", rows,
                         lambda rows, gpu, command: f"# GPU time per kernel of one call ({gpu})\n\n`{command}`\n"
                         + "\n".join(lines) + "\n")
    print(md)


if __name__ == "__main__":
    main()
