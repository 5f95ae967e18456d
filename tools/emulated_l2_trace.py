#!/usr/bin/env python3
"""The emulated CDNA3 forward's per-XCD K/V streams next to the L2 model's trace, per mapping.

Needs a build with the emulated backend (CXX=clang++-19 CHIPLET_FA_EMULATE=cdna3 pip install
--no-build-isolation .). Runs the forward on random fp16 inputs of the shape given, with the
emulated dispatcher dealing workgroups over the topology's XCDs, and prints per mapping whether
every XCD read exactly the model's stream (workgroups in dispatch order, each with its Q bytes
and its K/V tile pairs in order), the ACCs each XCD touched, the simulator's hit rate on the
emulated streams and on the model's own, and the K/V bytes read against the model's count.

    python tools/emulated_l2_trace.py --heads 16 --seqlen 512 --head-dim 64
"""
import argparse
import sys

import torch

import chiplet_fa
from chiplet_fa.emulate import compare_with_model, per_xcd_tiles
from chiplet_fa.locality import preset


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int)
    p.add_argument("--seqlen", type=int, default=512)
    p.add_argument("--seqlen-k", type=int)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--gpu", default="mi300x", help="topology preset (its XCDs are the dispatcher's)")
    p.add_argument("--mapping-xcds", type=int, default=8)
    args = p.parse_args(argv)
    if not chiplet_fa.emulate.available():
        print("emulated_l2_trace: this build has no emulated CDNA3 backend", file=sys.stderr)
        return 1
    kv_heads, seqlen_k = args.kv_heads or args.heads, args.seqlen_k or args.seqlen
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(args.batch, args.seqlen, args.heads, args.head_dim, generator=gen).half()
    k, v = (torch.randn(args.batch, seqlen_k, kv_heads, args.head_dim, generator=gen).half() for _ in range(2))
    topology = preset(args.gpu)
    print(f"B={args.batch} H={args.heads} H_kv={kv_heads} N={args.seqlen} N_k={seqlen_k} D={args.head_dim} "
          f"causal={args.causal} on {topology.name} ({topology.num_domains} XCDs), mapping for "
          f"{args.mapping_xcds} XCDs")
    print(f"  {'mapping':21s} {'streams':>8s} {'ACCs/XCD':>9s} {'hit (emu)':>10s} {'hit (model)':>12s} "
          f"{'K/V read':>10s} {'K/V model':>10s}")
    for mapping in chiplet_fa.MAPPINGS:
        c = compare_with_model(q, k, v, args.causal, mapping, args.mapping_xcds, topology)
        n_blocks = -(-seqlen_k // c.shape.block_n)
        accs = sorted(len({p // n_blocks for p in tiles}) for tiles in per_xcd_tiles(c.emulated).values())
        print(f"  {mapping:21s} {'same' if c.same_streams else 'DIFFER':>8s} {accs[0]:>4d}-{accs[-1]:<4d} "
              f"{c.emulated_prediction.hit_rate:>10.1%} {c.model_prediction.hit_rate:>12.1%} "
              f"{c.emulated_kv_bytes / 2**20:>8.2f}MB {c.model_prediction.kv_read_bytes / 2**20:>8.2f}MB")
        for line in c.differences:
            print(f"      {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
