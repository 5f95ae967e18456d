"""Forward and backward milliseconds of chiplet_fa's CPU path against torch's CPU SDPA, one process.

  python bench/cpu.py --out bench/results             # the two shapes, fp32 and bf16 (2 cores: ~1 min)
  python bench/cpu.py --dtypes float32 --out /tmp/r    # fp32 only
  python bench/cpu.py --shapes 1,8,8,2048,64,causal 4,8,2,512,128 --out /tmp/r   # chosen shapes
  python bench/cpu.py --threads 1 --out /tmp/r         # one thread (default: torch's count)
Writes cpu.json and the table generated from it, cpu.md; shapes: bench/harness.py's grammar. Both sides run on torch's intra-op thread count (chiplet_fa's CPU
kernels size their threads by it too), with the (B, N, H, D) tensors SDPA gets as (B, H, N, D)
views. Each column is warmed up once, then timed once a round for --rounds rounds, the columns
taking turns (each round starting one column later), and reported as the median of its rounds.
chiplet_fa's backward times the bwd operator alone (given out and lse); SDPA's times
torch.autograd.grad over a retained graph.
"""
import argparse
import os
import platform
import sys
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402
from harness import Shape  # noqa: E402

import chiplet_fa  # noqa: E402,F401  (registers the operators)

# The forward's two shapes of the issue that set the target.
SHAPES = [Shape(1, 8, 8, 2048, 64, True), Shape(2, 16, 16, 1024, 128, False)]
COLUMNS = ("chiplet_fwd", "sdpa_fwd", "chiplet_bwd", "sdpa_bwd")


def cpu_model():
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def run_shape(b, hq, hkv, n, d, causal, dtype, rounds):
    gen = torch.Generator().manual_seed(0)
    q, k, v, dout = (torch.randn(b, n, h, d, generator=gen).to(dtype) for h in (hq, hkv, hkv, hq))
    ops = torch.ops.chiplet_fa
    out, lse = ops.fwd(q, k, v, None, causal)
    leaves = [t.detach().requires_grad_() for t in harness.sdpa_views(q, k, v)]
    kept = harness.sdpa("sdpa", *leaves, causal)  # its graph kept for repeated backwards
    fns = {"chiplet_fwd": lambda: ops.fwd(q, k, v, None, causal),
           "sdpa_fwd": lambda: harness.sdpa("sdpa", *leaves, causal),
           "chiplet_bwd": lambda: ops.bwd(dout, q, k, v, out, lse, None, causal),
           "sdpa_bwd": lambda: torch.autograd.grad(kept, leaves, dout.transpose(1, 2), retain_graph=True)}
    with torch.no_grad():
        times = harness.time_in_turns({c: fns[c] for c in COLUMNS if c.endswith("fwd")}, rounds=rounds,
                                      total_ms=0, rotate=True)
    times.update(harness.time_in_turns({c: fns[c] for c in COLUMNS if c.endswith("bwd")}, rounds=rounds,
                                       total_ms=0, rotate=True))
    backend = SDPBackend(torch._fused_sdp_choice(*leaves, is_causal=causal, enable_gqa=hq != hkv)).name
    return {"B": b, "H_q": hq, "H_kv": hkv, "N": n, "D": d, "causal": causal,
            "dtype": str(dtype).removeprefix("torch."), "sdpa_backend": backend, **times}


def markdown(result):
    lines = [f"# chiplet_fa CPU path against torch's CPU SDPA (ms a call, median of {result['rounds']} rounds)", "",
             *harness.header_lines(result),
             f"torch {result['torch']}, {result['threads']} threads (torch.get_num_threads(); chiplet_fa's CPU "
             f"kernels take the same count), CPU: {result['cpu']} ({result['cores']} logical cores), torch's CPU "
             f"capability {result['capability']} (chiplet_fa's kernels take the same instruction set).", "",
             "| B | H_q | H_kv | N | D | causal | dtype | chiplet_fa fwd | SDPA fwd | fwd ratio | chiplet_fa bwd "
             "| SDPA bwd | bwd ratio | SDPA backend |",
             "|" + "---|" * 14]
    for r in result["rows"]:
        lines.append(f"| {r['B']} | {r['H_q']} | {r['H_kv']} | {r['N']} | {r['D']} | {'yes' if r['causal'] else 'no'} | "
                     f"{r['dtype']} | {r['chiplet_fwd']:.1f} | {r['sdpa_fwd']:.1f} | "
                     f"{r['chiplet_fwd'] / r['sdpa_fwd']:.2f} | {r['chiplet_bwd']:.1f} | {r['sdpa_bwd']:.1f} | "
                     f"{r['chiplet_bwd'] / r['sdpa_bwd']:.2f} | {r['sdpa_backend']} |")
    lines += ["", "Ratios are chiplet_fa / SDPA: below 1, chiplet_fa is faster."]
    return "\n".join(lines) + "\n"


def parser():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    harness.add_shapes_arguments(ap, "the two shapes")
    ap.add_argument("--dtypes", nargs="+", choices=["float32", "bfloat16"], default=["float32", "bfloat16"])
    ap.add_argument("--rounds", type=int, default=7, help="timed calls of each column (default 7)")
    ap.add_argument("--threads", type=int, help="torch.set_num_threads first (default: torch's count)")
    return ap


def runs(args):
    return harness.shape_runs(args, SHAPES)


def main(argv=None):
    args = parser().parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    result = harness.result_header("cpu", torch=torch.__version__, threads=torch.get_num_threads(), cpu=cpu_model(),
                                   cores=os.cpu_count(), capability=torch.backends.cpu.get_cpu_capability(),
                                   rounds=args.rounds)
    rows = []
    for dtype in args.dtypes:
        for run in runs(args):
            rows.append(run_shape(*run, getattr(torch, dtype), args.rounds))
            r = rows[-1]
            print(f"{run} {dtype}: fwd {r['chiplet_fwd']:.1f} ms (SDPA {r['sdpa_fwd']:.1f}), "
                  f"bwd {r['chiplet_bwd']:.1f} ms (SDPA {r['sdpa_bwd']:.1f})", flush=True)
    print(harness.save_results(args.out, dict(result, rows=rows), markdown))


if __name__ == "__main__":
    main()
