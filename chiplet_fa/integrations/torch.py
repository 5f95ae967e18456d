"""chiplet_fa as torch's flash-attention implementation.

torch (2.10 and later) keeps a registry of flash-attention implementations behind the flash backend
of F.scaled_dot_product_attention (torch.nn.attention.register_flash_attention_impl). Importing this
module registers "chiplet_fa" there and activates nothing; one line then routes torch's flash
kernels to chiplet_fa in every model that calls SDPA, varlen_attn or torch's context parallelism:

    import chiplet_fa.integrations.torch
    torch.nn.attention.activate_flash_attention_impl("chiplet_fa")   # or chiplet_fa.integrations.torch.activate()
    torch.nn.attention.restore_flash_attention_impl()                 # torch's own kernel again

Activation overrides, on the CUDA dispatch key (ROCm builds' HIP devices dispatch through it too),
the aten ops those paths call on each device: _scaled_dot_product_flash_attention and its backward
(SDPA's flash backend, context parallelism's ring), _flash_attention_forward,
_flash_attention_forward_no_dropout_inplace and _flash_attention_backward (varlen_attn). They keep
torch's contracts: the (B, H, N, D) layout of the SDPA ops with the output a transposed view of a
(B, N, H, D) buffer, lse (B, H, N) or (H, T) packed in float32 (float64 for float64 inputs), rng
state and philox outputs as zero tensors, an empty debug mask. Dense and packed (cum_seq_q/k)
batches, GQA, scale, windows and ALiBi (forward) are served. is_causal on these ops aligns the mask
to the bottom-right corner when N_q != N_k, as torch's own flash kernel does
(torch/nn/attention/bias.py calls it with is_causal=True for CausalVariant.LOWER_RIGHT); SDPA itself
routes a causal call with N_q != N_k to another backend. What chiplet_fa cannot serve goes, with no
error, to the kernel registered before activation: dropout, a debug mask, seqused_k, block_table,
ALiBi slopes of another dtype, dtypes and head dims this build's kernels lack, tensors on another
device. `served` and `fallbacks` count what went where.
"""
import collections
import contextlib
import warnings
from typing import Callable, Dict, Optional, Tuple

import torch

import chiplet_fa  # noqa: F401  (torch.ops.chiplet_fa)

NAME = "chiplet_fa"
# The dispatch keys activation overrides. Tests put "CPU" here to run torch's paths through the
# CPU kernels on a machine without a GPU (a test-only switch: on CPU, SDPA's own choice is
# _scaled_dot_product_flash_attention_for_cpu, overridden too).
DISPATCH_KEYS: Tuple[str, ...] = ("CUDA",)
served: collections.Counter = collections.Counter()     # op -> calls chiplet_fa ran
fallbacks: collections.Counter = collections.Counter()  # (op, reason) -> calls the previous kernel ran


class _Handle:
    """What activation registered; remove() restores the kernels that were there before."""

    def __init__(self, library: torch.library.Library):
        self.library = library

    def remove(self) -> None:
        if self.library is not None:
            self.library._destroy()
            self.library = None


def _registry():
    return getattr(torch.nn.attention, "register_flash_attention_impl", None)


def activate() -> None:
    """Routes torch's flash-attention ops to chiplet_fa (torch's activate_flash_attention_impl)."""
    if _registry() is None:
        raise RuntimeError(f"chiplet_fa: torch {torch.__version__} has no flash-attention registry "
                           "(torch.nn.attention.register_flash_attention_impl, torch >= 2.10)")
    torch.nn.attention.activate_flash_attention_impl(NAME)


def restore() -> None:
    """torch's default flash-attention kernels again (torch's restore_flash_attention_impl)."""
    torch.nn.attention.restore_flash_attention_impl()


@contextlib.contextmanager
def active():
    """chiplet_fa behind torch's flash ops within the block."""
    activate()
    try:
        yield
    finally:
        restore()


# --- what chiplet_fa can serve ---

def _gpu_kernels(device: torch.device, kind: str) -> Tuple[set, int]:
    """(dtypes, widest head dim) of the kernels the build has for the device's family."""
    key = (str(device), kind)
    if key not in _GPU_KERNELS:
        info = chiplet_fa.build_info(device)
        family = info["kernel_path"].split(" ")[0]
        kinds = info["kernels"].get(family, {}).get(kind, {"dtypes": [], "head_dims": [0]})
        names = {"fp16": torch.float16, "bf16": torch.bfloat16}
        _GPU_KERNELS[key] = ({names[d] for d in kinds["dtypes"]}, max(kinds["head_dims"]))
    return _GPU_KERNELS[key]


_GPU_KERNELS: Dict[Tuple[str, str], Tuple[set, int]] = {}
_CPU_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _unsupported(kind: str, tensors, dropout_p: float = 0.0, **extra) -> Optional[str]:
    """Why chiplet_fa cannot serve a call (None: it can). extra: name -> a value that must be None/False."""
    q = tensors[0]
    if dropout_p != 0.0:
        return "dropout"
    for name, value in extra.items():
        if value is not None and value is not False:
            return name
    if any(t.device != q.device or t.dtype != q.dtype for t in tensors[1:] if t is not None):
        return "mixed devices or dtypes"
    if q.device.type == "cpu":
        return None if q.dtype in _CPU_DTYPES else "dtype"
    if q.device.type != "cuda":
        return "device"
    dtypes, widest = _gpu_kernels(q.device, kind)
    if q.dtype not in dtypes:
        return "dtype"
    return None if q.size(-1) <= widest else "head dim"


def _last_dim_contiguous(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    return t.contiguous() if t is not None and t.size(-1) > 1 and t.stride(-1) != 1 else t


def _window(size: Optional[int]) -> int:
    return -1 if size is None else int(size)


def _aux(q: torch.Tensor):
    """rng_state, philox offset and debug mask of a call without dropout."""
    return (torch.zeros(2, dtype=torch.uint64, device=q.device), torch.zeros((), dtype=torch.uint64, device=q.device),
            torch.empty(0, dtype=q.dtype, device=q.device))


def _forward(q, k, v, cu_q, cu_k, max_q, max_k, causal, scale, left, right, alibi, out=None):
    """chiplet_fa's forward in flash-attention's layout: (out, lse)."""
    q, k, v = (_last_dim_contiguous(t) for t in (q, k, v))
    if cu_q is None:
        o, lse = torch.ops.chiplet_fa.fwd(q, k, v, scale, causal, window_left=left, window_right=right,
                                          alibi_slopes=alibi)
        return (o, lse) if out is None else (out.copy_(o), lse)
    args = (q, k, v, cu_q.to(torch.int32), cu_k.to(torch.int32), int(max_q), int(max_k), scale, causal, left, right,
            0.0, alibi)
    if out is None:
        return torch.ops.chiplet_fa.fwd_varlen(*args)
    return out, torch.ops.chiplet_fa.fwd_varlen(*args, out=out)


def _backward(dout, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, causal, scale, left, right):
    dout, q, k, v, out = (_last_dim_contiguous(t) for t in (dout, q, k, v, out))
    deterministic = torch.are_deterministic_algorithms_enabled()
    if cu_q is None:
        return torch.ops.chiplet_fa.bwd(dout, q, k, v, out, lse, scale, causal, "auto", -1, deterministic, left, right)
    return torch.ops.chiplet_fa.bwd_varlen(dout, q, k, v, out, lse, cu_q.to(torch.int32), cu_k.to(torch.int32),
                                           int(max_q), int(max_k), scale, causal, left, right,
                                           deterministic=deterministic)


# --- the aten ops (torch's schemas). An implementation checks first and raises _Unsupported
# before any work; _bind then hands the call, as it came, to the kernel registered before. ---

class _Unsupported(Exception):
    """Why chiplet_fa cannot serve a call."""


def _refuse(why: Optional[str]) -> None:
    if why:
        raise _Unsupported(why)


def _refuse_forward(tensors, dropout_p, return_debug_mask, seqused_k, block_table, alibi_slopes) -> None:
    _refuse(_unsupported("fwd", tensors, dropout_p, debug_mask=return_debug_mask, seqused_k=seqused_k,
                         block_table=block_table))
    _refuse("alibi_slopes dtype" if alibi_slopes is not None and alibi_slopes.dtype != torch.float32 else None)


def _flash_forward(query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, return_debug_mask,
                   *, scale=None, window_size_left=None, window_size_right=None, seqused_k=None, alibi_slopes=None,
                   block_table=None, num_splits=None):
    _refuse_forward((query, key, value), dropout_p, return_debug_mask, seqused_k, block_table, alibi_slopes)
    out, lse = _forward(query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, is_causal, scale,
                        _window(window_size_left), _window(window_size_right), alibi_slopes)
    return (out, lse, *_aux(query))


def _flash_forward_inplace(out, query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal,
                           return_debug_mask, *, scale=None, window_size_left=None, window_size_right=None,
                           seqused_k=None, alibi_slopes=None, block_table=None, num_splits=None):
    _refuse_forward((query, key, value, out), dropout_p, return_debug_mask, seqused_k, block_table, alibi_slopes)
    _refuse("out's last dimension strided" if out.size(-1) > 1 and out.stride(-1) != 1 else None)
    return _forward(query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, is_causal, scale,
                    _window(window_size_left), _window(window_size_right), alibi_slopes, out=out)[1]


def _lse_layout(q: torch.Tensor, lse: torch.Tensor, packed: bool) -> Optional[str]:
    """None when lse is chiplet_fa's for q (flash-attention layout): else the forward was another kernel's."""
    shape = (q.size(1), q.size(0)) if packed else (q.size(0), q.size(2), q.size(1))
    dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    return None if lse.dtype == dtype and tuple(lse.shape) == shape else "logsumexp from another kernel"


def _flash_backward(grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
                    is_causal, rng_state, unused, *, scale=None, window_size_left=None, window_size_right=None):
    _refuse(_unsupported("bwd", (query, key, value, grad_out, out), dropout_p))
    _refuse(_lse_layout(query, logsumexp, cum_seq_q is not None))
    return _backward(grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, is_causal, scale,
                     _window(window_size_left), _window(window_size_right))


def _bnhd(*tensors):
    """SDPA's (B, H, N, D) as flash-attention's (B, N, H, D) views, and back."""
    return tuple(t.transpose(1, 2) for t in tensors)


def _sdpa_flash(query, key, value, dropout_p=0.0, is_causal=False, return_debug_mask=False, *, scale=None):
    _refuse(_unsupported("fwd", (query, key, value), dropout_p, debug_mask=return_debug_mask))
    _refuse("not 4-D" if query.dim() != 4 else None)
    out, lse = _forward(*_bnhd(query, key, value), None, None, 0, 0, is_causal, scale, -1, -1, None)
    rng_state, philox_offset, debug_mask = _aux(query)
    return (out.transpose(1, 2), lse, None, None, query.size(2), key.size(2), rng_state, philox_offset, debug_mask)


def _sdpa_flash_backward(grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
                         is_causal, philox_seed, philox_offset, *, scale=None):
    _refuse(_unsupported("bwd", (query, key, value, grad_out, out), dropout_p))
    _refuse(_lse_layout(query.transpose(1, 2), logsumexp, False))
    grads = _backward(*_bnhd(grad_out, query, key, value, out), logsumexp, None, None, 0, 0, is_causal, scale, -1, -1)
    return _bnhd(*grads)


def _refuse_top_left(query, key, is_causal) -> None:
    # F.scaled_dot_product_attention's own CPU op: its is_causal is top-left.
    _refuse("top-left causal with N_q != N_k" if is_causal and query.size(-2) != key.size(-2) else None)


def _sdpa_flash_cpu(query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    _refuse(_unsupported("fwd", (query, key, value), dropout_p, attn_mask=attn_mask))
    _refuse_top_left(query, key, is_causal)
    _refuse("not 4-D" if query.dim() != 4 else None)
    out, lse = _forward(*_bnhd(query, key, value), None, None, 0, 0, is_causal, scale, -1, -1, None)
    return out.transpose(1, 2), lse


def _sdpa_flash_cpu_backward(grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, *, attn_mask=None,
                             scale=None):
    _refuse(_unsupported("bwd", (query, key, value, grad_out, out), dropout_p, attn_mask=attn_mask))
    _refuse_top_left(query, key, is_causal)
    _refuse(_lse_layout(query.transpose(1, 2), logsumexp, False))
    grads = _backward(*_bnhd(grad_out, query, key, value, out), logsumexp, None, None, 0, 0, is_causal, scale, -1, -1)
    return _bnhd(*grads)


# op -> (implementation, the keys it is registered on)
_OPS: Dict[str, Tuple[Callable, Tuple[str, ...]]] = {
    "_flash_attention_forward": (_flash_forward, ("CUDA", "CPU")),
    "_flash_attention_forward_no_dropout_inplace": (_flash_forward_inplace, ("CUDA", "CPU")),
    "_flash_attention_backward": (_flash_backward, ("CUDA", "CPU")),
    "_scaled_dot_product_flash_attention": (_sdpa_flash, ("CUDA", "CPU")),
    "_scaled_dot_product_flash_attention_backward": (_sdpa_flash_backward, ("CUDA", "CPU")),
    "_scaled_dot_product_flash_attention_for_cpu": (_sdpa_flash_cpu, ("CPU",)),
    "_scaled_dot_product_flash_attention_for_cpu_backward": (_sdpa_flash_cpu_backward, ("CPU",)),
}


def _previous_kernel(op: str, key: str):
    """The kernel `op` runs on `key` now, to hand unsupported calls back to (None: no such kernel)."""
    if not hasattr(torch.library, "get_kernel") or not torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{op}",
                                                                                                      key):
        return None
    return torch.library.get_kernel(f"aten::{op}", key)


def _register() -> _Handle:
    """The registry's register_fn: chiplet_fa's kernels for the ops above on DISPATCH_KEYS."""
    library = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():  # replacing torch's kernels is the point; the previous one is kept
        warnings.filterwarnings("ignore", message="(?s).*Overriding a previously registered kernel")
        for op, (impl, keys) in _OPS.items():
            for key in DISPATCH_KEYS:
                if key in keys and hasattr(torch.ops.aten, op):
                    library.impl(op, _bind(op, impl, _previous_kernel(op, key)), key, with_keyset=True)
    return _Handle(library)


def _bind(op: str, impl, previous):
    """The kernel registered for `op`: impl, or the previous kernel for what impl refuses."""
    def kernel(keyset, *args, **kwargs):
        try:
            result = impl(*args, **kwargs)
        except _Unsupported as why:
            fallbacks[(op, str(why))] += 1
            if previous is None:
                raise RuntimeError(f"chiplet_fa cannot serve aten::{op} ({why}) and torch {torch.__version__} "
                                   "cannot hand the call back to its own kernel (torch.library.get_kernel, "
                                   "torch >= 2.9)") from None
            return previous.call_boxed(keyset, *args, **kwargs)
        served[op] += 1
        return result
    return kernel


if _registry() is not None:
    _registry()(NAME, register_fn=_register)
