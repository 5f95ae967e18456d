"""KV-cache decoding, one process: time per step and GB/s of K/V read by
chiplet_fa.flash_attn_with_kvcache (contiguous and paged caches, 1 or 4 new query tokens) next to
SDPA's flash, efficient and cuDNN backends on the same contiguous cache, FlashAttention-4 (where
installed) on the same caches as ours, and the GPU's copy
bandwidth measured in the same process (a device-to-device copy: bytes read + written per second).

  python bench/decode.py --out bench/results [--quick]
GB/s counts the K and V bytes each step must read (B x cache length x H_kv x D x 2 bytes x 2);
"of copy" is that over the measured copy bandwidth. SDPA has no paged cache and no bottom-right
causal mask for several query tokens: every row is non-causal and SDPA reads the contiguous cache
(GQA through enable_gqa). Writes decode_<gpu>.json and generates decode.md again.
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402
from harness import time_ms  # noqa: E402

import chiplet_fa  # noqa: E402

PEERS = ("sdpa_flash", "sdpa_efficient", "sdpa_cudnn")
KV_BUDGET = 24 << 30  # K + V bytes a row may allocate


def rows(quick):
    """(H_q, H_kv, D, cache length, batch, layout, new tokens): GQA 32/8 across lengths and batches
    (contiguous, pages of 16 and 256, 1 and 4 tokens), GQA 64/8 and MHA 32 contiguous, D 64 and 256."""
    lengths, batches = ((8192, 32768), (1, 64)) if quick else ((1024, 8192, 32768, 131072), (1, 8, 64, 256))
    out = []
    for n in lengths:
        for b in batches:
            for layout in ("contiguous", "page16", "page256"):
                out.append((32, 8, 128, n, b, layout, 1))
            out += [(32, 8, 128, n, b, "contiguous", 4), (64, 8, 128, n, b, "contiguous", 1),
                    (32, 32, 128, n, b, "contiguous", 1)]
    if not quick:
        out += [(32, 8, d, n, b, "contiguous", 1) for d in (64, 256) for n in (8192, 32768) for b in (8, 64)]
    return [r for r in out if 2 * r[4] * r[3] * r[1] * r[2] * 2 <= KV_BUDGET]


def copy_gbps():
    """Device-to-device copy bandwidth (read + write bytes per second) of a 2 GiB tensor."""
    src = torch.empty(1 << 30, dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(src)
    ms = time_ms(lambda: dst.copy_(src))
    return 2 * src.numel() * 2 / ms / 1e6


def paged(k, v, page):
    """The same keys and values as pages in shuffled pools, and the block table that finds them."""
    b, n, h, d = k.shape
    order = torch.randperm(b * (n // page), device="cuda")
    pools = []
    for cache in (k, v):
        pool = torch.empty(b * (n // page), page, h, d, dtype=cache.dtype, device="cuda")
        pool[order] = cache.view(-1, page, h, d)
        pools.append(pool)
    return (*pools, order.view(b, -1).int())


def run(hq, hkv, d, n, b, layout, new):
    opts = dict(device="cuda", dtype=torch.bfloat16)
    q = torch.randn(b, new, hq, d, **opts)
    k, v = (torch.randn(b, n, hkv, d, **opts) for _ in range(2))
    seqlens = torch.full((b,), n, dtype=torch.int32, device="cuda")
    k_cache, v_cache, table = (k, v, None) if layout == "contiguous" else paged(k, v, int(layout[4:]))
    row = {"H_q": hq, "H_kv": hkv, "D": d, "cache": n, "batch": b, "layout": layout, "new": new}
    gbytes = 2 * b * n * hkv * d * 2 / 1e9

    def ours():
        chiplet_fa.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=seqlens, block_table=table)
    row["chiplet_fa_ms"] = time_ms(ours)
    row["chiplet_fa_gbps"] = gbytes / row["chiplet_fa_ms"] * 1e3
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    for peer in PEERS:
        def sdpa(peer=peer):
            with torch.nn.attention.sdpa_kernel(harness.PEERS[peer]):
                torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, enable_gqa=hq != hkv)
        row[f"{peer}_ms"] = time_or_none(sdpa, RuntimeError, peer)
    if harness.fa4():
        row["fa4_ms"] = time_or_none(fa4_step(q, k_cache, v_cache, seqlens, table), Exception, "fa4")
    return row


def time_or_none(fn, refusals, peer):
    """fn's median time, None where it refuses the shape (its first call, outside the timing: FA4
    compiles there)."""
    return harness.runs_or_none(fn, refusals, peer) and time_ms(fn)


def fa4_step(q, k_cache, v_cache, seqlens, table):
    """FA4's decoding step on the same caches as ours: its varlen call with one run of queries per
    sequence, the cache lengths in use (seqused_k) and the pages' table (page_table)."""
    b, new = q.shape[:2]
    cu_q = torch.arange(0, (b + 1) * new, new, dtype=torch.int32, device=q.device)
    flat = q.reshape(b * new, *q.shape[2:])
    return lambda: harness.fa4().flash_attn_varlen_func(flat, k_cache, v_cache, cu_seqlens_q=cu_q, max_seqlen_q=new,
                                                         seqused_k=seqlens, page_table=table)


def markdown(result):
    columns = [p for p in (*PEERS, "fa4") if f"{p}_ms" in result["rows"][0]]
    lines = [f"# chiplet_fa KV-cache decoding, {result['gpu']}, bf16 (median time per step)", "",
             *harness.header_lines(result),
             f"Copy bandwidth measured in the same process: {result['copy_gbps']:.0f} GB/s (read + written). "
             "GB/s: K and V bytes a step reads; of copy: that over the copy bandwidth; vs best: the fastest "
             "peer's time over ours (SDPA reads the contiguous cache in every row, FA4 the same cache as ours; "
             "- where it refused).", "",
             "| H_q | H_kv | D | cache | batch | layout | new | chiplet_fa us | GB/s | of copy | "
             + " | ".join(f"{p} us" for p in columns) + " | vs best |", "|" + "---|" * (11 + len(columns))]
    for r in result["rows"]:
        peers = [r.get(f"{p}_ms") for p in columns]
        known = [p for p in peers if p]
        best = f"{min(known) / r['chiplet_fa_ms']:.2f}" if known else "-"
        lines.append(f"| {r['H_q']} | {r['H_kv']} | {r['D']} | {r['cache']} | {r['batch']} | {r['layout']} | {r['new']} | "
                     f"{r['chiplet_fa_ms'] * 1e3:.1f} | {r['chiplet_fa_gbps']:.0f} | "
                     f"{r['chiplet_fa_gbps'] / result['copy_gbps']:.2f} | "
                     + " | ".join(f"{p * 1e3:.1f}" if p else "-" for p in peers) + f" | {best} |")
    return "\n".join(lines) + "\n"


def main():
    args = harness.gpu_bench_args(__doc__, extra=lambda ap: ap.add_argument(
        "--quick", action="store_true", help="8K and 32K caches at batch 1 and 64 only"))
    result = harness.result_header("decode", copy_gbps=copy_gbps())
    found = []
    for shape in rows(args.quick):
        found.append(run(*shape))
        print(found[-1], flush=True)
        torch.cuda.empty_cache()
    print(harness.save_results(args.out, dict(result, rows=found), markdown))


if __name__ == "__main__":
    main()
