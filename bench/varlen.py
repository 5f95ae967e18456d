"""Packed (variable-length) batches against the fixed-length kernel, one process: forward and
backward TFLOP/s of chiplet_fa.fwd_varlen/bwd_varlen on a mix of lengths next to the dense
fwd/bwd on the same number of tokens, and SDPA's flash backend run sequence by sequence as
the peer a user without a varlen kernel has, and FlashAttention-4's varlen calls where it is installed.

  python bench/varlen.py --out bench/results
FLOPs of a packed batch are counted per sequence (4 * len_q * len_k * H * D forward, causal
halved, backward 2.5x), so a mix and a fixed length are compared at the work they really do.
Writes varlen_<gpu>.json and generates varlen.md again (a section per varlen JSON in --out).
"""
import itertools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402
from harness import attention_flops, fmt, time_ms  # noqa: E402

import chiplet_fa  # noqa: E402,F401

# (name, lengths): equal lengths (the packed path's overhead alone) and realistic mixes of the
# same total tokens (prefill batches and packed training documents).
TOKENS = 32768
MIXES = [
    ("4 x 8K (equal)", [8192] * 4),
    ("mix 8-16K", [16384, 7168, 4096, 2048, 1536, 1024, 256, 128, 64, 32, 16, 8, 8]),
    ("mix 1-2K", [2047] + [2048] * 7 + [1024] * 8 + [512] * 8 + [384] * 8 + [257] + [256] * 2 + [255] + [1]),
]
HEADS = [(32, 8, 128), (16, 16, 64)]  # (H_q, H_kv, D)


def packed_flops(lens, hq, d, causal):
    return sum(attention_flops(1, hq, n, n, d, causal) for n in lens)


def run(name, lens, hq, hkv, d, causal):
    total, batch = sum(lens), len(lens)
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, dout = (torch.randn(total, hq, d, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(2))
    k, v = (torch.randn(total, hkv, d, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(2))
    cu = torch.tensor([0] + list(itertools.accumulate(lens)), dtype=torch.int32, device="cuda")
    n = max(lens)
    ops = torch.ops.chiplet_fa
    flops = packed_flops(lens, hq, d, causal)
    row = {"mix": name, "sequences": batch, "tokens": total, "H_q": hq, "H_kv": hkv, "D": d, "causal": causal}
    out, lse = ops.fwd_varlen(q, k, v, cu, cu, n, n, causal=causal)
    row["varlen_fwd"] = flops / time_ms(lambda: ops.fwd_varlen(q, k, v, cu, cu, n, n, causal=causal)) / 1e9
    row["varlen_bwd"] = 2.5 * flops / time_ms(
        lambda: ops.bwd_varlen(dout, q, k, v, out, lse, cu, cu, n, n, causal=causal)) / 1e9
    # The fixed-length kernel on the same tokens: batch of equal sequences of the mean length.
    mean = total // batch
    qd, kd, vd, dod = (t[: batch * mean].view(batch, mean, t.shape[1], d) for t in (q, k, v, dout))
    dense_flops = attention_flops(batch, hq, mean, mean, d, causal)
    out_d, lse_d = ops.fwd(qd, kd, vd, causal=causal)
    row["dense_fwd"] = dense_flops / time_ms(lambda: ops.fwd(qd, kd, vd, causal=causal)) / 1e9
    row["dense_bwd"] = 2.5 * dense_flops / time_ms(lambda: ops.bwd(dod, qd, kd, vd, out_d, lse_d, causal=causal)) / 1e9
    # SDPA flash, one call per sequence (what a padded-free user without varlen must do).
    bounds = list(zip(cu[:-1].tolist(), cu[1:].tolist()))

    def per_sequence():
        for a, b in bounds:
            harness.sdpa("sdpa_flash", *harness.sdpa_views(q[None, a:b], k[None, a:b], v[None, a:b], expand_kv=True),
                         causal)
    row["sdpa_flash_per_seq_fwd"] = flops / time_ms(per_sequence) / 1e9
    if harness.fa4():
        row.update(fa4_varlen(q, k, v, dout, cu, n, causal, flops))
    return row


def fa4_varlen(q, k, v, dout, cu, n, causal, flops):
    """FlashAttention-4's varlen forward and backward (over a kept graph) on the same packed batch;
    None where it refuses (its first calls, outside the timing, compile its kernels)."""
    fa4 = harness.fa4()
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]

    def fwd():
        return fa4.flash_attn_varlen_func(*leaves, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=n, max_seqlen_k=n,
                                          causal=causal)[0]
    row = {"fa4_fwd": None, "fa4_bwd": None}
    if not harness.runs_or_none(fwd, Exception, "fa4"):
        return row
    row["fa4_fwd"] = flops / time_ms(fwd) / 1e9
    kept = fwd()
    bwd = harness.runs_or_none(lambda: torch.autograd.grad(kept, leaves, dout, retain_graph=True), Exception, "fa4")
    row["fa4_bwd"] = bwd and 2.5 * flops / time_ms(bwd) / 1e9
    return row


def markdown(result):
    rows = result["rows"]
    fa4 = "fa4_fwd" in rows[0]
    lines = [f"# chiplet_fa packed (varlen) batches, {result['gpu']}, bf16, auto mapping (TFLOP/s, median)", "",
             *harness.header_lines(result),
             f"Every row has {TOKENS} tokens. dense = the fixed-length kernel on the same tokens as equal "
             "sequences of the mean length; FLOPs per sequence (causal halved, backward 2.5x forward)"
             + ("; FA4: FlashAttention-4's varlen calls on the same packed batch." if fa4 else "."), "",
             "| mix | seqs | H_q | H_kv | D | causal | varlen fwd | dense fwd | varlen / dense fwd | varlen bwd | "
             "dense bwd | varlen / dense bwd | SDPA flash per sequence fwd |"
             + (" FA4 fwd | FA4 bwd | fwd / FA4 | bwd / FA4 |" if fa4 else ""),
             "|" + "---|" * (13 + 4 * fa4)]
    ratio = lambda a, b: "n/a" if not b else f"{a / b:.2f}"  # noqa: E731
    for r in rows:
        lines.append(f"| {r['mix']} | {r['sequences']} | {r['H_q']} | {r['H_kv']} | {r['D']} | "
                     f"{'yes' if r['causal'] else 'no'} | {fmt(r['varlen_fwd'])} | {fmt(r['dense_fwd'])} | "
                     f"{r['varlen_fwd'] / r['dense_fwd']:.2f} | {fmt(r['varlen_bwd'])} | {fmt(r['dense_bwd'])} | "
                     f"{r['varlen_bwd'] / r['dense_bwd']:.2f} | {fmt(r['sdpa_flash_per_seq_fwd'])} |"
                     + (f" {fmt(r['fa4_fwd'])} | {fmt(r['fa4_bwd'])} | {ratio(r['varlen_fwd'], r['fa4_fwd'])} | "
                        f"{ratio(r['varlen_bwd'], r['fa4_bwd'])} |" if fa4 else ""))
    return "\n".join(lines) + "\n"


def main():
    args = harness.gpu_bench_args(__doc__)
    result = harness.result_header("varlen")
    rows = []
    for (name, lens), (hq, hkv, d), causal in itertools.product(MIXES, HEADS, (True, False)):
        assert sum(lens) == TOKENS, name
        rows.append(run(name, lens, hq, hkv, d, causal))
        print({k: fmt(v) if isinstance(v, float) else v for k, v in rows[-1].items()}, flush=True)
        torch.cuda.empty_cache()
    print(harness.save_results(args.out, dict(result, rows=rows), markdown))


if __name__ == "__main__":
    main()
