"""`python -m chiplet_fa` / `chiplet-fa`: check the op on this machine, show what the mapping
policies do to a paper-sized grid, and time them on a GPU.

Subcommands: `run` (the default) and, once chiplet_fa.locality is present, `simulate`;
`--version` prints what the installation was built with (chiplet_fa.build_info()).
"""
import argparse
import math
import sys

import torch

from . import MAPPINGS, build_info, map_workgroups, num_l2_domains
from .build import format_build_info

POLICIES = ("auto",) + MAPPINGS


def pick_device():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    return device, name


def self_check(device):
    """Compare the op with torch's SDPA in fp64 under flash-attention's rule: error at most twice
    that of SDPA in the input dtype, plus a floor. GQA, causal, N not a multiple of any tile."""
    dtypes = (torch.float16, torch.bfloat16) if device.type == "cuda" else (torch.float32, torch.bfloat16)
    floors = {torch.float16: 1e-3, torch.bfloat16: 8e-3, torch.float32: 1e-5}
    gen = torch.Generator().manual_seed(0)
    shape_q, shape_kv = (2, 300, 8, 128), (2, 300, 2, 128)
    ok = True
    for dtype in dtypes:
        q = torch.randn(shape_q, generator=gen).to(device, dtype)
        k = torch.randn(shape_kv, generator=gen).to(device, dtype)
        v = torch.randn(shape_kv, generator=gen).to(device, dtype)

        def sdpa(t):
            out = torch.nn.functional.scaled_dot_product_attention(
                *(x.transpose(1, 2).to(t) for x in (q, k, v)), is_causal=True, enable_gqa=True)
            return out.transpose(1, 2).double()

        ref = sdpa(torch.float64)
        bound = 2 * (sdpa(dtype) - ref).abs().max().item() + floors[dtype]
        for policy in POLICIES:
            out, lse = torch.ops.chiplet_fa.fwd(q, k, v, causal=True, mapping=policy, num_xcds=8)
            err = (out.double() - ref).abs().max().item()
            passed = err <= bound and bool(torch.isfinite(lse).all())
            ok &= passed
            print(f"  {str(dtype).removeprefix('torch.'):9s} {policy:21s} max error {err:.2e} "
                  f"(bound {bound:.2e})  {'PASS' if passed else 'FAIL'}")
    return ok


def acc_ids(tiles, num_q_heads, num_kv_heads):
    return tiles[:, 0] * num_kv_heads + tiles[:, 1] // (num_q_heads // num_kv_heads)


def modelled_part(args):
    """The part the mapping report draws: an MI300X unless --xcds or --cus-per-xcd say otherwise."""
    part = f"{args.xcds} XCDs of {args.cus_per_xcd} CUs"
    return f"an MI300X, {part}" if (args.xcds, args.cus_per_xcd) == (8, 38) else f"a part with {part}"


def mapping_report(args):
    """What each policy does on an MI300X-like part: the first workgroups' tiles and XCDs, how
    many ACCs each XCD has in flight in its first round, and over how many XCDs an ACC spreads."""
    num_m_blocks = math.ceil(args.seqlen / args.block_m)
    X, shape = args.xcds, (args.batch, args.heads, args.kv_heads, num_m_blocks)
    grid = args.batch * args.heads * num_m_blocks
    num_accs = args.batch * args.kv_heads
    # Printed right after this machine's L2 domains: say that the table is not about them.
    print(f"\nMapping report for {modelled_part(args)} (set by --xcds and --cus-per-xcd), not for this machine:")
    print(f"Mappings for B={args.batch}, H_q={args.heads}, H_kv={args.kv_heads}, N={args.seqlen}, "
          f"BLOCK_M={args.block_m}: {num_m_blocks} m-blocks, {grid} workgroups, {num_accs} ACCs, "
          f"{X} XCDs (xcd = wid % {X})")
    tiles = {p: map_workgroups(p, *shape, X) for p in MAPPINGS}
    print("\n  wid  xcd  " + "  ".join(f"{p:>20s}" for p in MAPPINGS) + "   (batch/head/m_block)")
    for wid in range(min(args.show, grid)):
        cells = ("{}/{}/{}".format(*tiles[p][wid].tolist()) for p in MAPPINGS)
        print(f"  {wid:3d}  {wid % X:3d}  " + "  ".join(f"{c:>20s}" for c in cells))

    resident = args.cus_per_xcd * args.wgs_per_cu
    print(f"\n  first round: {resident} resident workgroups per XCD ({args.cus_per_xcd} CUs x "
          f"{args.wgs_per_cu}); ACCs in flight per XCD, and XCDs each ACC's tiles run on")
    domain = torch.arange(grid) % X
    for policy in MAPPINGS:
        acc = acc_ids(tiles[policy], args.heads, args.kv_heads)
        first_round = [acc[x::X][:resident].unique().numel() for x in range(X)]
        xcds_per_acc = torch.bincount((acc * X + domain).unique() // X, minlength=num_accs)
        print(f"  {policy:21s} ACCs in flight per XCD {first_round}   XCDs per ACC: "
              f"mean {xcds_per_acc.double().mean().item():.2f}, max {xcds_per_acc.max().item()}")


def time_mappings(device, args):
    """Mean time of `iters` back-to-back launches after warm-up, per policy, by CUDA events."""
    B, H, N, D = 1, args.bench_heads, args.bench_seqlen, 128
    q, k, v = (torch.randn(B, N, H, D, device=device, dtype=torch.bfloat16) for _ in range(3))
    flops = 4 * B * H * N * N * D
    print(f"\nTiming (bf16, B={B}, H={H}, N={N}, D={D}, non-causal, num_xcds={args.xcds}):")
    for policy in POLICIES:
        for _ in range(3):
            torch.ops.chiplet_fa.fwd(q, k, v, mapping=policy, num_xcds=args.xcds)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(args.iters):
            torch.ops.chiplet_fa.fwd(q, k, v, mapping=policy, num_xcds=args.xcds)
        end.record()
        torch.cuda.synchronize()
        ms = start.elapsed_time(end) / args.iters
        print(f"  {policy:21s} {ms:8.3f} ms  {flops / ms / 1e9:7.1f} TFLOP/s")


def run(args):
    device, name = pick_device()
    print(f"chiplet_fa on {device.type} ({name}); L2 domains detected: {num_l2_domains(device)}; "
          f"kernels: {build_info(device)['kernel_path']}")
    print("Self-check against torch SDPA in fp64 (B=2, N=300, H_q=8, H_kv=2, D=128, causal):")
    ok = self_check(device)
    mapping_report(args)
    if device.type == "cuda":
        time_mappings(device, args)
    else:
        print("\nNo GPU: timing skipped.")
    print(f"\nself-check: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


def add_run_parser(subparsers):
    p = subparsers.add_parser("run", help="self-check, mapping report and (on a GPU) timings")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=128, help="query heads of the report's shape")
    p.add_argument("--kv-heads", type=int, default=None, help="KV heads (default: --heads, MHA)")
    p.add_argument("--seqlen", type=int, default=128 * 1024)
    p.add_argument("--block-m", type=int, default=128, help="query rows per workgroup")
    p.add_argument("--xcds", type=int, default=8, help="L2 domains to map for (MI300X: 8)")
    p.add_argument("--cus-per-xcd", type=int, default=38)
    p.add_argument("--wgs-per-cu", type=int, default=1, help="resident workgroups per CU")
    p.add_argument("--show", type=int, default=16, help="workgroups to list")
    p.add_argument("--bench-heads", type=int, default=32)
    p.add_argument("--bench-seqlen", type=int, default=8192)
    p.add_argument("--iters", type=int, default=10)
    p.set_defaults(func=run)


def build_parser():
    parser = argparse.ArgumentParser(prog="chiplet-fa", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="store_true",
                        help="print what the installation was built with (chiplet_fa.build_info()) and exit")
    subparsers = parser.add_subparsers(dest="command")
    add_run_parser(subparsers)
    # The L2-locality model adds `simulate` when its package is present; any other missing
    # module is a real error and propagates. Its add_parser must set_defaults(func=...).
    try:
        from .locality import cli as locality_cli
    except ModuleNotFoundError as err:
        if err.name not in ("chiplet_fa.locality", "chiplet_fa.locality.cli"):
            raise
    else:
        locality_cli.add_parser(subparsers)
    return parser


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version")):
        argv = ["run"] + argv  # `run` is the default subcommand
    args = build_parser().parse_args(argv)
    if args.version:
        print(format_build_info(build_info()))
        return 0
    if getattr(args, "kv_heads", 0) is None:
        args.kv_heads = args.heads
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
