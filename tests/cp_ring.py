"""torch's context parallelism (ring attention over DTensor) through chiplet_fa, on CPU processes.

    python tests/cp_ring.py --world 2 --rotate allgather      # run by tests/test_torch_native.py
    python tests/cp_ring.py --world 2 --device cuda           # the ranks share one GPU (gloo)

Each of --world gloo processes activates chiplet_fa as torch's flash-attention implementation on
the CPU key (the test-only switch of chiplet_fa.integrations.torch; with --device cuda the CUDA
key, every rank on the one GPU, bf16, SDPA held to its flash backend), shards q, k, v and dout along
the sequence with torch's head-tail load balancer, runs causal attention forward and backward under
`context_parallel` and unshards the results; rank 0 compares them with single-process attention on
the whole sequence and prints one JSON line. On CPU tensors F.scaled_dot_product_attention chooses
_scaled_dot_product_flash_attention_for_cpu, which the ring does not handle ("CP only supports flash
attention and memory efficient attention now"), so F.scaled_dot_product_attention is replaced for
the run by what it calls on a GPU with the flash backend: aten._scaled_dot_product_flash_attention.
"""
import argparse
import json
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """SDPA's flash-backend dispatch on a GPU (the ring replaces the function by its __name__)."""
    assert attn_mask is None
    return torch.ops.aten._scaled_dot_product_flash_attention(query, key, value, dropout_p, is_causal,
                                                              scale=scale)[0]


def inputs(args):
    g = torch.Generator().manual_seed(args.world)
    n, d = (1024 * args.world, 128) if args.device == "cuda" else (48 * args.world, 32)  # 2 * world chunks
    shapes = [(2, args.heads_q, n, d), (2, args.heads_kv, n, d), (2, args.heads_kv, n, d), (2, args.heads_q, n, d)]
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float64
    return [torch.randn(s, generator=g, dtype=torch.float64).to(args.device, dtype) for s in shapes]


def reference(q, k, v, dout, dtype=torch.float64):
    """out, dq, dk, dv of causal attention computed in `dtype`."""
    q, k, v, dout = (t.to(dtype) for t in (q, k, v, dout))
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    group = q.size(1) // k.size(1)
    kk, vv = (t.repeat_interleave(group, dim=1) for t in leaves[1:])
    scores = (leaves[0] @ kk.transpose(-1, -2)) / q.size(-1) ** 0.5
    n = q.size(2)
    scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    out = scores.softmax(-1) @ vv
    out.backward(dout)
    return [out.detach()] + [t.grad for t in leaves]


def run(rank: int, args, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    import chiplet_fa.integrations.torch as native
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._attention import (_cp_options, context_parallel_unshard,
                                                                  set_rotate_method)

    cuda = args.device == "cuda"
    native.DISPATCH_KEYS = ("CUDA",) if cuda else ("CPU",)
    native.activate()
    set_rotate_method(args.rotate)
    _cp_options.enable_load_balance = True
    mesh = init_device_mesh(args.device, (args.world,))
    q, k, v, dout = inputs(args)
    want = reference(q, k, v, dout)
    # the 2x rule's yardstick on the GPU: the same math in bf16
    yardstick = reference(q, k, v, dout, torch.bfloat16) if cuda else want
    original = F.scaled_dot_product_attention
    if not cuda:
        F.scaled_dot_product_attention = scaled_dot_product_attention
    try:
        shards = [t.clone() for t in (q, k, v, dout)]
        with context_parallel(mesh, buffers=shards, buffer_seq_dims=[2] * 4, no_restore_buffers=set(shards)), \
                sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            leaves = [t.requires_grad_() for t in shards[:3]]
            out = F.scaled_dot_product_attention(*leaves, is_causal=True, enable_gqa=True)
            out.backward(shards[3])
        got = context_parallel_unshard(mesh, [out.detach()] + [t.grad for t in leaves], [2] * 4)
    finally:
        F.scaled_dot_product_attention = original
    names = ("out", "dq", "dk", "dv")
    errors = {n: (g.double() - w.double()).abs().max().item() for n, g, w in zip(names, got, want)}
    budget = {n: (y.double() - w.double()).abs().max().item() for n, y, w in zip(names, yardstick, want)}
    calls = {op: n for op, n in native.served.items() if op.startswith("_scaled_dot_product_flash_attention")}
    if rank == 0:
        print(json.dumps({"world": args.world, "rotate": args.rotate, "device": args.device, "errors": errors,
                          "yardstick": budget, "served": calls, "fallbacks": len(native.fallbacks)}), flush=True)
    dist.barrier()  # no rank tears its connections down while another still sends on them
    dist.destroy_process_group()
    # With everything checked and printed, each rank leaves without the interpreter's finalisation:
    # there, after destroy_process_group has returned, torch's teardown aborted a rank ("terminate
    # called without an active exception", no Python frame) in about one run in 35.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--rotate", choices=("allgather", "alltoall"), default="allgather")
    ap.add_argument("--heads-q", type=int, default=4)
    ap.add_argument("--heads-kv", type=int, default=2)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parsed = ap.parse_args()
    torch.set_num_threads(1)
    mp.spawn(run, args=(parsed, free_port()), nprocs=parsed.world)
    sys.exit(0)
