"""Forward and backward milliseconds of chiplet_fa's CPU path against torch's CPU SDPA, one process.

  python bench/cpu.py --out bench/results             # the two shapes, fp32 and bf16 (2 cores: ~1 min)
  python bench/cpu.py --dtypes float32 --out /tmp/r    # fp32 only
  python bench/cpu.py --shapes 1,8,2048,64,causal 4,8,512,128 --out /tmp/r   # chosen shapes
  python bench/cpu.py --threads 1 --out /tmp/r         # one thread (default: torch's count)
Writes cpu.md and cpu.json. Both sides run on torch's intra-op thread count (chiplet_fa's CPU
kernels size their threads by it too), with the (B, N, H, D) tensors SDPA gets as (B, H, N, D)
views. Each column is warmed up once, then timed once a round for --rounds rounds, the columns
taking turns (each round starting one column later), and reported as the median of its rounds.
chiplet_fa's backward times the bwd operator alone (given out and lse); SDPA's times
torch.autograd.grad over a retained graph.
"""
import argparse
import json
import os
import platform
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import time_in_turns  # noqa: E402

import chiplet_fa  # noqa: E402,F401  (registers the operators)

# (B, H, N, D, causal): the forward's two shapes of the issue that set the target.
SHAPES = [(1, 8, 2048, 64, True), (2, 16, 1024, 128, False)]
COLUMNS = ("chiplet_fwd", "sdpa_fwd", "chiplet_bwd", "sdpa_bwd")


def parse_shape(text):
    """B,H,N,D[,causal]"""
    parts = text.split(",")
    return tuple(int(x) for x in parts[:4]) + (parts[4:] == ["causal"],)


def cpu_model():
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def run_shape(b, h, n, d, causal, dtype, rounds):
    gen = torch.Generator().manual_seed(0)
    q, k, v, dout = (torch.randn(b, n, h, d, generator=gen).to(dtype) for _ in range(4))
    ops = torch.ops.chiplet_fa
    out, lse = ops.fwd(q, k, v, None, causal)
    leaves = [t.transpose(1, 2).detach().requires_grad_() for t in (q, k, v)]
    kept = F.scaled_dot_product_attention(*leaves, is_causal=causal)  # its graph kept for repeated backwards
    fns = {"chiplet_fwd": lambda: ops.fwd(q, k, v, None, causal),
           "sdpa_fwd": lambda: F.scaled_dot_product_attention(*leaves, is_causal=causal),
           "chiplet_bwd": lambda: ops.bwd(dout, q, k, v, out, lse, None, causal),
           "sdpa_bwd": lambda: torch.autograd.grad(kept, leaves, dout.transpose(1, 2), retain_graph=True)}
    with torch.no_grad():
        times = time_in_turns({c: fns[c] for c in COLUMNS if c.endswith("fwd")}, rounds=rounds, total_ms=0,
                              rotate=True)
    times.update(time_in_turns({c: fns[c] for c in COLUMNS if c.endswith("bwd")}, rounds=rounds, total_ms=0,
                               rotate=True))
    backend = SDPBackend(torch._fused_sdp_choice(*leaves, is_causal=causal)).name
    return {"B": b, "H": h, "N": n, "D": d, "causal": causal, "dtype": str(dtype).removeprefix("torch."),
            "sdpa_backend": backend, **times}


def markdown(info, rows):
    lines = [f"# chiplet_fa CPU path against torch's CPU SDPA (ms a call, median of {info['rounds']} rounds)", "",
             f"Command: `{info['command']}`", "",
             f"torch {info['torch']}, {info['threads']} threads (torch.get_num_threads(); chiplet_fa's CPU "
             f"kernels take the same count), CPU: {info['cpu']} ({info['cores']} logical cores), torch's CPU "
             f"capability {info['capability']} (chiplet_fa's kernels take the same instruction set).", "",
             "A 2-core machine shared with other work when the committed table was made: read the ratios, "
             "which come from calls timed in turns in one process, rather than the absolute times.", "",
             "| B | H | N | D | causal | dtype | chiplet_fa fwd | SDPA fwd | fwd ratio | chiplet_fa bwd | SDPA bwd "
             "| bwd ratio | SDPA backend |",
             "|" + "---|" * 13]
    for r in rows:
        lines.append(f"| {r['B']} | {r['H']} | {r['N']} | {r['D']} | {'yes' if r['causal'] else 'no'} | "
                     f"{r['dtype']} | {r['chiplet_fwd']:.1f} | {r['sdpa_fwd']:.1f} | "
                     f"{r['chiplet_fwd'] / r['sdpa_fwd']:.2f} | {r['chiplet_bwd']:.1f} | {r['sdpa_bwd']:.1f} | "
                     f"{r['chiplet_bwd'] / r['sdpa_bwd']:.2f} | {r['sdpa_backend']} |")
    lines += ["", "Ratios are chiplet_fa / SDPA: below 1, chiplet_fa is faster."]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--shapes", nargs="+", metavar="B,H,N,D[,causal]", help="these shapes instead of the two")
    ap.add_argument("--dtypes", nargs="+", choices=["float32", "bfloat16"], default=["float32", "bfloat16"])
    ap.add_argument("--rounds", type=int, default=7, help="timed calls of each column (default 7)")
    ap.add_argument("--threads", type=int, help="torch.set_num_threads first (default: torch's count)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    shapes = [parse_shape(s) for s in args.shapes] if args.shapes else SHAPES
    info = {"command": "python bench/cpu.py " + " ".join(sys.argv[1:]), "torch": torch.__version__,
            "threads": torch.get_num_threads(), "cpu": cpu_model(), "cores": os.cpu_count(),
            "capability": torch.backends.cpu.get_cpu_capability(), "rounds": args.rounds}
    rows = []
    for dtype in args.dtypes:
        for shape in shapes:
            rows.append(run_shape(*shape, getattr(torch, dtype), args.rounds))
            r = rows[-1]
            print(f"{shape} {dtype}: fwd {r['chiplet_fwd']:.1f} ms (SDPA {r['sdpa_fwd']:.1f}), "
                  f"bwd {r['chiplet_bwd']:.1f} ms (SDPA {r['sdpa_bwd']:.1f})", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cpu.json").write_text(json.dumps({**info, "rows": rows}, indent=1))
    md = markdown(info, rows)
    (args.out / "cpu.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
