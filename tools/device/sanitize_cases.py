"""Small launches covering the kernels' edge paths (forward and backward), for compute-sanitizer:

  compute-sanitizer --tool memcheck python3 tools/device/sanitize_cases.py [--only 4 8]

(tools/device/device_run.sh's `sanitize` stage runs memcheck, racecheck and synccheck on it.)
Each case prints its name and, once its kernels are done, its time, so a stalled run shows where;
`--only 4 8` runs those cases alone (numbers as printed). A case whose head dim or dtype the
installed build lacks (CHIPLET_FA_DTYPES / CHIPLET_FA_HDIMS) is left out, and says so."""
import argparse
import time

import torch

import chiplet_fa  # noqa: F401
from build_coverage import built

DENSE = [  # (B, N_q, N_k, H_q, H_kv, D, causal, dtype, mapping)
    (2, 200, 333, 4, 2, 128, True, torch.bfloat16, "swizzled_head_first"),
    (1, 333, 77, 6, 3, 64, True, torch.float16, "swizzled_block_first"),
    (1, 129, 300, 2, 1, 56, False, torch.bfloat16, "block_first"),
    (1, 64, 64, 2, 2, 256, True, torch.bfloat16, "head_first"),
    (1, 17, 1, 3, 1, 20, False, torch.float16, "head_first"),
    # deterministic dQ in fixed point (sm90), with and without a mask; at D <= 64 the consumers
    # stage the one dQ panel in turn
    (2, 200, 333, 4, 2, 96, False, torch.bfloat16, "head_first"),
    (1, 300, 200, 4, 1, 128, True, torch.float16, "head_first"),
    (1, 300, 400, 4, 2, 64, True, torch.bfloat16, "head_first"),
    # sm90 above D = 128: the wide kernel, deterministic in fixed point too
    (1, 200, 150, 4, 2, 192, False, torch.float16, "swizzled_head_first"),
]
# Packed batches (an empty sequence, lengths off the tiles) with a sliding window, softcap and ALiBi;
# D = 192 last (sm90's shared-key backward), so the earlier cases keep their numbers.
PACKED = [(d, dtype, kw) for d, dtype in ((128, torch.bfloat16), (64, torch.float16), (192, torch.bfloat16))
          for kw in (dict(causal=True, window_left=40), dict(softcap=20.0, alibi_slopes="slopes"))]


def dense(b, nq, nk, hq, hkv, d, causal, dtype, mapping, num_xcds=8):
    q = torch.randn(b, nq, hq, d, device="cuda", dtype=dtype)
    k = torch.randn(b, nk, hkv, d, device="cuda", dtype=dtype)
    v = torch.randn(b, nk, hkv, d, device="cuda", dtype=dtype)
    out, lse = torch.ops.chiplet_fa.fwd(q, k, v, None, causal, mapping, num_xcds)
    dout = torch.randn_like(out)  # atomic and deterministic dQ
    for deterministic in (False, True):
        torch.ops.chiplet_fa.bwd(dout, q, k, v, out, lse, None, causal, mapping, num_xcds, deterministic)


def packed(d, dtype, kw, lens=(70, 0, 263, 1)):
    cu = torch.tensor([0, *lens], dtype=torch.int32, device="cuda").cumsum(0, dtype=torch.int32)
    total, longest = int(cu[-1]), max(lens)
    q, k, v = (torch.randn(total, 4, d, device="cuda", dtype=dtype) for _ in range(3))
    kw = {**kw, "alibi_slopes": torch.rand(4, device="cuda")} if "alibi_slopes" in kw else kw
    out, lse = torch.ops.chiplet_fa.fwd_varlen(q, k, v, cu, cu, longest, longest, **kw)
    for deterministic in (False, True):
        torch.ops.chiplet_fa.bwd_varlen(torch.randn_like(q), q, k, v, out, lse, cu, cu, longest, longest, **kw,
                                        deterministic=deterministic)


# GQA under a mask with the group's rows over 25 MB (16 x 2048 x 128 x 8 bytes): the backward
# splits each KV block's query heads over workgroups that add partial dK, dV in fp32, or
# (deterministic) write them to a slice each (sm90; kernel_binding.h, kv_split_for).
SPLIT = [(1, 2048, 2048, 16, 1, 128, True, torch.bfloat16, "head_first")]
# The forward's last partial round split over keys (kernels/tail_split.h): on 132 SMs, 198 tiles
# leave 66, cut into 132 units of their key blocks (tests/test_tail_split.py's shape), at D = 128
# and at D = 256 (one Q stage, narrower key blocks).
TAIL = [(1, 200, 600, 99, 33, d, False, torch.bfloat16, "head_first") for d in (128, 256)]

# More L2 domains than SMs (the persistent forward's workers serve the domains without one of
# their own, mapping/domain_queues.h), and a packed batch of many short sequences (the backward's
# per-row passes find each row's sequence by a search over cu_seqlens_q).
DOMAINS = [(1, 2048, 2048, 16, 16, 128, False, torch.bfloat16, "swizzled_head_first", 133)]
MANY = [(64, torch.float16, dict(causal=True), tuple((i * 37) % 150 for i in range(300)))]


def decode(d, dtype, paged, lens=(0, 37, 300), new=2):
    """KV-cache decoding: appends (rotated) at cache_seqlens, then split-KV attention and the merge.
    Paged: three splits under a causal mask. Contiguous: a picked batch entry, left padding, ALiBi
    (one head a tile), a window and the split heuristic."""
    b, page = len(lens), 16
    pages = -(-(max(lens) + new) // page)
    dev = dict(device="cuda", dtype=dtype)
    shape = (b * pages + 1, page, 2, d) if paged else (b + 1, pages * page, 2, d)
    k_cache, v_cache = torch.randn(shape, **dev), torch.randn(shape, **dev)
    ints = dict(device="cuda", dtype=torch.int32)
    if paged:
        kw = dict(block_table=torch.randperm(b * pages + 1, device="cuda")[:b * pages].view(b, pages).int(),
                  causal=True, num_splits=3)
    else:
        kw = dict(cache_batch_idx=torch.arange(1, b + 1, **ints), cache_leftpad=torch.tensor((0, 5, 100), **ints),
                  alibi_slopes=torch.rand(8, device="cuda"), window_size=(50, 0))
    angles = torch.rand(pages * page + 8, d // 4, device="cuda")
    chiplet_fa.flash_attn_with_kvcache(
        torch.randn(b, 2, 8, d, **dev), k_cache, v_cache, torch.randn(b, new, 2, d, **dev),
        torch.randn(b, new, 2, d, **dev), rotary_cos=angles.cos().to(dtype), rotary_sin=angles.sin().to(dtype),
        cache_seqlens=torch.tensor(lens, **ints), **kw)


DECODE = [(128, torch.bfloat16, True), (64, torch.float16, False)]

CASES = [(dense, c) for c in DENSE] + [(packed, c) for c in PACKED] + [(dense, c) for c in SPLIT + TAIL]
CASES += [(dense, c) for c in DOMAINS] + [(packed, c) for c in MANY] + [(decode, c) for c in DECODE]


def in_build(run, case):
    """Whether the installed build has the case's forward and backward kernels (a reduced build
    leaves some out: those cases are skipped, as the smoke sweep skips them, not failed)."""
    d, dtype = (case[5], case[7]) if run is dense else (case[0], case[1])
    return built("fwd", dtype, d) and (run is decode or built("bwd", dtype, d))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", type=int, nargs="+", help="these case numbers alone")
    for i in ap.parse_args().only or range(len(CASES)):
        run, case = CASES[i]
        if not in_build(run, case):
            print(f"case {i}: {run.__name__} {case} left out (not in this build)", flush=True)
            continue
        print(f"case {i}: {run.__name__} {case}", flush=True)
        start = time.perf_counter()
        run(*case)
        torch.cuda.synchronize()
        print(f"case {i}: {time.perf_counter() - start:.1f} s", flush=True)
    print("sanitize cases ran")
