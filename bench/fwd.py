"""Forward TFLOP/s of chiplet_fa per mapping against torch SDPA backends, one process.

  python bench/fwd.py --out bench/results            # the paper's sweep (H200: ~3 min)
  python bench/fwd.py --quick --out /tmp/r            # two shapes, for iterating
Writes fwd_<gpu>.md and fwd_<gpu>.json; --plot draws TFLOP/s per mapping (needs matplotlib).
"""
import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import attention_flops, fmt, save_results, time_ms  # noqa: E402

import chiplet_fa  # noqa: E402

try:  # a progress bar where tqdm is installed (it is on the H200 image), plain lines otherwise
    from tqdm import tqdm
except ImportError:
    tqdm = None

MAPPINGS = ("block_first", "head_first", "swizzled_block_first", "swizzled_head_first")
SDPA = {"sdpa_flash": SDPBackend.FLASH_ATTENTION, "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
        "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION}
# (B, H_q, H_kv, N, D): the anchors' shapes, GQA 64/8 and the DeepSeek-V3 head dim.
SWEEP = [(1, 8, 8, 32768, 128), (1, 32, 32, 32768, 128), (1, 128, 128, 8192, 128),
         (1, 128, 128, 32768, 128), (4, 128, 128, 8192, 128), (1, 128, 128, 65536, 128),
         (4, 32, 32, 8192, 128), (1, 64, 8, 32768, 128), (1, 128, 128, 8192, 56),
         (1, 128, 128, 32768, 56)]
QUICK = [(1, 128, 128, 8192, 128), (1, 64, 8, 8192, 128)]


def run_shape(b, hq, hkv, n, d, causal, num_xcds):
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(b, n, hq, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    k = torch.randn(b, n, hkv, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    v = torch.randn(b, n, hkv, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    flops = attention_flops(b, hq, n, n, d, causal)
    row = {"B": b, "H_q": hq, "H_kv": hkv, "N": n, "D": d, "causal": causal}
    for m in MAPPINGS:
        ms = time_ms(lambda: torch.ops.chiplet_fa.fwd(q, k, v, None, causal, m, num_xcds))
        row[m] = flops / ms / 1e9
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    for name, backend in SDPA.items():
        try:
            with sdpa_kernel(backend):
                fn = lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal,  # noqa: E731
                                                            enable_gqa=hq != hkv)
                row[name] = flops / time_ms(fn) / 1e9
        except RuntimeError:
            row[name] = None  # backend does not support this shape
    return row


def markdown(rows, gpu, command):
    cols = list(MAPPINGS) + list(SDPA)
    lines = [f"# chiplet_fa forward, {gpu}, bf16 (TFLOP/s, median; causal FLOPs halved)", "",
             f"Command: `{command}`", "",
             "| B | H_q | H_kv | N | D | causal | " + " | ".join(cols) + " | head_first / flash | head_first / cuDNN |",
             "|" + "---|" * (8 + len(cols))]
    for r in rows:
        ratio = lambda key: "n/a" if not r.get(key) else f"{r['head_first'] / r[key]:.2f}"  # noqa: E731
        lines.append(f"| {r['B']} | {r['H_q']} | {r['H_kv']} | {r['N']} | {r['D']} | "
                     f"{'yes' if r['causal'] else 'no'} | " + " | ".join(fmt(r[c]) for c in cols)
                     + f" | {ratio('sdpa_flash')} | {ratio('sdpa_cudnn')} |")
    return "\n".join(lines) + "\n"


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = [f"{r['B']}x{r['H_q']}/{r['H_kv']}\nN={r['N'] // 1024}K d{r['D']}{' c' if r['causal'] else ''}"
              for r in rows]
    fig, ax = plt.subplots(figsize=(max(8, len(rows) * 0.9), 4.5))
    cols = list(MAPPINGS) + list(SDPA)
    width = 0.8 / len(cols)
    for i, c in enumerate(cols):
        ax.bar([x + i * width for x in range(len(rows))], [r[c] or 0 for r in rows], width, label=c)
    ax.set_xticks([x + 0.4 for x in range(len(rows))], labels, fontsize=7)
    ax.set_ylabel("TFLOP/s")
    ax.legend(fontsize=7, ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--quick", action="store_true", help="two shapes only")
    ap.add_argument("--causal", choices=["both", "yes", "no"], default="both")
    ap.add_argument("--num-xcds", type=int, default=8,
                    help="domains the swizzled policies assume (8 = MI300X; NVIDIA dispatch is not round-robin)")
    ap.add_argument("--plot", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench/fwd.py needs a CUDA or ROCm device")
    causals = {"both": (False, True), "yes": (True,), "no": (False,)}[args.causal]
    shapes = [(s, c) for s in (QUICK if args.quick else SWEEP) for c in causals]
    rows = []
    bar = tqdm(total=len(shapes), unit="shape") if tqdm else None
    for i, (shape, causal) in enumerate(shapes):
        rows.append(run_shape(*shape, causal, args.num_xcds))
        r = rows[-1]
        line = (f"{shape} causal={causal}: head_first {r['head_first']:.0f}, block_first "
                f"{r['block_first']:.0f}, flash {fmt(r['sdpa_flash'])}, cudnn {fmt(r['sdpa_cudnn'])}")
        if bar:
            bar.set_postfix_str(line)
            bar.update()
        else:
            print(f"[{i + 1}/{len(shapes)}] {line}", flush=True)
        torch.cuda.empty_cache()
    if bar:
        bar.close()
    md, gpu = save_results(args.out, "fwd", rows, markdown)
    if args.plot:
        plot(rows, args.out / f"fwd_{gpu}.png")
    print(md)


if __name__ == "__main__":
    main()
