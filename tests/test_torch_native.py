"""chiplet_fa as torch's flash-attention implementation (chiplet_fa.integrations.torch): the
registry, activation and restore, and torch's own paths (SDPA, varlen_attn, torch.compile, context
parallelism) through chiplet_fa. Without a GPU the test-only switch overrides the CPU key instead of
CUDA; the GPU tests run the CUDA key itself."""
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import chiplet_fa
from _bwd_reference import attention_grads_ref
from devices import needs_cuda
from reference import attention_ref, varlen_ref

native = pytest.importorskip("chiplet_fa.integrations.torch")
needs_registry = pytest.mark.skipif(not hasattr(torch.nn.attention, "register_flash_attention_impl"),
                                    reason=f"torch {torch.__version__} has no flash-attention registry")
pytestmark = needs_registry


def varlen_api(*names):
    """torch.nn.attention.varlen's functions, skipping the test on a torch whose varlen API lacks one
    (varlen_attn's window_size and enable_gqa, varlen_attn_out: newer than torch 2.11's)."""
    varlen = pytest.importorskip("torch.nn.attention.varlen")
    missing = [n for n in names if not hasattr(varlen, n)]
    params = inspect.signature(varlen.varlen_attn).parameters if hasattr(varlen, "varlen_attn") else {}
    missing += [f"varlen_attn({p}=)" for p in ("window_size", "enable_gqa") if p not in params]
    if missing:
        pytest.skip(f"torch {torch.__version__}'s varlen API lacks {', '.join(missing)}")
    return [getattr(varlen, n) for n in names]


@pytest.fixture
def on_cpu(monkeypatch):
    """chiplet_fa active on the CPU key for the test; restored after it."""
    monkeypatch.setattr(native, "DISPATCH_KEYS", ("CPU",))
    native.served.clear()
    native.fallbacks.clear()
    with native.active():
        yield


def sdpa_inputs(b, h_q, h_kv, n_q, n_k, d, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = [(b, h_q, n_q, d), (b, h_kv, n_k, d), (b, h_kv, n_k, d), (b, h_q, n_q, d)]
    return [torch.randn(s, generator=g, dtype=torch.float64).to(dtype) for s in shapes]


def sdpa_grads(q, k, v, dout, **kw):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*leaves, **kw)
    return [out.detach(), *torch.autograd.grad(out, leaves, dout)]


def test_registered_on_import_and_not_active():
    assert "chiplet_fa" in torch.nn.attention.list_flash_attention_impls()
    assert torch.nn.attention.current_flash_attention_impl() is None


def test_activate_and_restore(monkeypatch):
    monkeypatch.setattr(native, "DISPATCH_KEYS", ("CPU",))
    q, k, v, _ = sdpa_inputs(1, 2, 2, 16, 16, 8)
    native.served.clear()
    torch.nn.attention.activate_flash_attention_impl("chiplet_fa")
    try:
        assert torch.nn.attention.current_flash_attention_impl() == "chiplet_fa"
        F.scaled_dot_product_attention(q, k, v)
        assert native.served["_scaled_dot_product_flash_attention_for_cpu"] == 1
    finally:
        torch.nn.attention.restore_flash_attention_impl()
    assert torch.nn.attention.current_flash_attention_impl() is None
    F.scaled_dot_product_attention(q, k, v)  # torch's own kernel again
    assert native.served["_scaled_dot_product_flash_attention_for_cpu"] == 1


@pytest.mark.parametrize("h_q, h_kv, n, causal, scale", [
    (4, 4, 100, True, None), (8, 2, 77, False, 0.3), (4, 1, 130, True, None),
])
def test_sdpa_through_chiplet_fa_matches_the_reference_with_gradients(on_cpu, h_q, h_kv, n, causal, scale):
    q, k, v, dout = sdpa_inputs(2, h_q, h_kv, n, n, 32)
    ref_out, ref_lse = attention_ref(*(t.transpose(1, 2) for t in (q, k, v)), causal=causal, softmax_scale=scale)
    ref = [ref_out.transpose(1, 2)] + [g.transpose(1, 2) for g in attention_grads_ref(
        *(t.transpose(1, 2) for t in (q, k, v, dout)), causal=causal, softmax_scale=scale)]
    got = sdpa_grads(q, k, v, dout, is_causal=causal, scale=scale, enable_gqa=h_q != h_kv)
    assert native.served["_scaled_dot_product_flash_attention_for_cpu"] == 1
    assert native.served["_scaled_dot_product_flash_attention_for_cpu_backward"] == 1
    for name, g, r in zip(("out", "dq", "dk", "dv"), got, ref):
        torch.testing.assert_close(g, r, rtol=0, atol=2e-6, msg=name)  # the CPU path's lse is float32


def test_half_precision_sdpa(on_cpu):
    q, k, v, dout = sdpa_inputs(1, 4, 4, 64, 64, 64, dtype=torch.bfloat16)
    got = sdpa_grads(q, k, v, dout, is_causal=True)
    assert native.served["_scaled_dot_product_flash_attention_for_cpu"] == 1
    bnhd = [t.double().transpose(1, 2) for t in (q, k, v, dout)]
    want = [attention_ref(*bnhd[:3], causal=True)[0]] + list(attention_grads_ref(*bnhd, causal=True))
    want = [w.transpose(1, 2) for w in want]
    for g, w in zip(got, want):
        assert (g.double() - w).abs().max() < 2e-2 * max(1.0, w.abs().max().item())


def test_what_chiplet_fa_cannot_serve_falls_back_without_error(on_cpu):
    q, k, v, _ = sdpa_inputs(1, 2, 2, 24, 40, 16)
    # top-left causal with N_q != N_k (SDPA's own CPU semantics) goes to torch's kernel
    out, _ = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, True)
    assert native.fallbacks[("_scaled_dot_product_flash_attention_for_cpu", "top-left causal with N_q != N_k")] == 1
    ref = attention_ref(*(t.transpose(1, 2) for t in (q, k[:, :, :24], v[:, :, :24])), causal=True)[0]
    torch.testing.assert_close(out, ref.transpose(1, 2), rtol=0, atol=1e-6)
    # an additive mask: torch's kernel, and no error
    mask = torch.randn(24, 40, dtype=q.dtype)
    out, _ = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, False, attn_mask=mask)
    assert native.fallbacks[("_scaled_dot_product_flash_attention_for_cpu", "attn_mask")] == 1
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # the math backend
    torch.testing.assert_close(out, want, rtol=0, atol=1e-6)


def test_an_op_torch_has_no_kernel_for_says_so(on_cpu):
    # The CPU build of torch has no kernel of its own for _flash_attention_forward to hand a call back to.
    q = torch.randn(1, 8, 2, 16)
    with pytest.raises(RuntimeError, match=r"chiplet_fa cannot serve aten::_flash_attention_forward \(dropout\)"):
        torch.ops.aten._flash_attention_forward(q, q, q, None, None, 8, 8, 0.5, False, False)


def test_lower_right_causal_as_torchs_flash_kernel(on_cpu):
    # is_causal on the flash ops aligns bottom-right when N_q != N_k (CausalVariant.LOWER_RIGHT).
    q, k, v, _ = sdpa_inputs(1, 2, 2, 20, 50, 16)
    out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True)[0]
    ref = attention_ref(*(t.transpose(1, 2) for t in (q, k, v)), causal=True)[0]
    torch.testing.assert_close(out, ref.transpose(1, 2), rtol=0, atol=1e-6)
    assert native.served["_scaled_dot_product_flash_attention"] == 1


@pytest.mark.parametrize("window", [(-1, -1), (-1, 0), (16, 0)])
def test_varlen_attn_through_chiplet_fa(on_cpu, window):
    AuxRequest, varlen_attn = varlen_api("AuxRequest", "varlen_attn")

    cu = torch.tensor([0, 30, 31, 95, 130], dtype=torch.int32)
    g = torch.Generator().manual_seed(1)
    q, dout = (torch.randn(130, 4, 32, generator=g, dtype=torch.float64) for _ in range(2))
    k, v = (torch.randn(130, 2, 32, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(2))
    q.requires_grad_()
    out, lse = varlen_attn(q, k, v, cu, cu, 64, 64, window_size=window, enable_gqa=True,
                           return_aux=AuxRequest(lse=True))
    grads = torch.autograd.grad(out, (q, k, v), dout)
    kw = dict(causal=window[1] == 0, window=(window[0], -1) if window[1] == 0 else window)
    ref_out, ref_lse = varlen_ref(q.detach(), k.detach(), v.detach(), cu, cu, **kw)
    torch.testing.assert_close(out, ref_out, rtol=0, atol=1e-6)
    torch.testing.assert_close(lse.double(), ref_lse, rtol=0, atol=1e-5)
    for b in range(4):
        s, e = int(cu[b]), int(cu[b + 1])
        want = attention_grads_ref(*(t.detach()[None, s:e] for t in (q, k, v, dout)), **kw)
        for gt, w in zip(grads, want):
            torch.testing.assert_close(gt[s:e], w[0], rtol=0, atol=2e-6)
    assert native.served["_flash_attention_forward"] == 1 and native.served["_flash_attention_backward"] == 1


def test_varlen_attn_out_writes_in_place(on_cpu):
    varlen_attn_out, = varlen_api("varlen_attn_out")

    cu = torch.tensor([0, 10, 40], dtype=torch.int32)
    q = torch.randn(40, 2, 16, dtype=torch.float64)
    out = torch.full_like(q, float("nan"))
    varlen_attn_out(out, q, q, q, cu, cu, 30, 30)
    torch.testing.assert_close(out, varlen_ref(q, q, q, cu, cu)[0], rtol=0, atol=1e-6)
    assert native.served["_flash_attention_forward_no_dropout_inplace"] == 1


def test_torch_compile_of_a_model_calling_sdpa_keeps_working(on_cpu):
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = torch.nn.Linear(64, 3 * 64, dtype=torch.float64)

        def forward(self, x):
            q, k, v = self.qkv(x).view(x.size(0), x.size(1), 3, 4, 16).permute(2, 0, 3, 1, 4)
            return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).flatten(2)

    torch.manual_seed(0)
    block, x = Block(), torch.randn(2, 50, 64, dtype=torch.float64, requires_grad=True)
    want = block(x)
    (want_grad,) = torch.autograd.grad(want.sum(), x)
    got = torch.compile(block, backend="aot_eager")(x)
    (got_grad,) = torch.autograd.grad(got.sum(), x)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    torch.testing.assert_close(got_grad, want_grad, rtol=0, atol=1e-5)
    assert native.served["_scaled_dot_product_flash_attention_for_cpu"] == 2  # eager and compiled


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("rotate", ["allgather", "alltoall"])
def test_context_parallel_ring_through_chiplet_fa(world, rotate):
    script = Path(__file__).with_name("cp_ring.py")
    run = subprocess.run([sys.executable, "-W", "ignore", str(script), "--world", str(world), "--rotate", rotate],
                         capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["fallbacks"] == 0
    # every ring step ran chiplet_fa: world steps forward and backward under load balancing
    assert result["served"] == {"_scaled_dot_product_flash_attention": world,
                                "_scaled_dot_product_flash_attention_backward": world}
    for name, err in result["errors"].items():
        assert err < 1e-5, (name, err)  # the ring merges the fp64 pieces in fp32 (torch upcasts out and lse to float32)


@needs_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("rotate", ["allgather", "alltoall"])
def test_gpu_context_parallel_ring_on_one_gpu(rotate):
    # Two gloo ranks share the GPU: torch's ring, chiplet_fa's CUDA kernels on each piece.
    script = Path(__file__).with_name("cp_ring.py")
    run = subprocess.run([sys.executable, "-W", "ignore", str(script), "--world", "2", "--rotate", rotate,
                          "--device", "cuda"], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["fallbacks"] == 0 and result["served"] == {"_scaled_dot_product_flash_attention": 2,
                                                            "_scaled_dot_product_flash_attention_backward": 2}
    for name, err in result["errors"].items():  # flash-attention's 2x rule, against bf16 math
        assert err <= 2 * result["yardstick"][name] + 1.6e-2, (name, err, result["yardstick"][name])


@needs_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_sdpa_routed_to_chiplet_fa_matches_its_own_api(causal):
    q, k, v, dout = (t.cuda() for t in sdpa_inputs(2, 8, 2, 1000, 1000, 128, dtype=torch.bfloat16))
    native.served.clear()
    with native.active(), torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
        got = sdpa_grads(q, k, v, dout, is_causal=causal, enable_gqa=True)
    assert native.served["_scaled_dot_product_flash_attention"] == 1
    assert native.served["_scaled_dot_product_flash_attention_backward"] == 1
    leaves = [t.transpose(1, 2).detach().clone().requires_grad_() for t in (q, k, v)]
    own = chiplet_fa.attention(*leaves, causal=causal)
    want = [own.transpose(1, 2).detach(), *(g.transpose(1, 2) for g in torch.autograd.grad(
        own, leaves, dout.transpose(1, 2)))]
    for name, g, w in zip(("out", "dq", "dk", "dv"), got, want):
        assert g.shape == w.shape, name
        # the same kernels (dQ's atomics add in any order)
        torch.testing.assert_close(g.float(), w.float(), rtol=0, atol=0 if name == "out" else 2e-2, msg=name)


@needs_cuda
@pytest.mark.gpu
def test_gpu_dropout_falls_back_to_torchs_kernel():
    q, k, v, _ = (t.cuda() for t in sdpa_inputs(1, 4, 4, 256, 256, 64, dtype=torch.float16))
    native.fallbacks.clear()
    with native.active(), torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.1)
    assert out.shape == q.shape and torch.isfinite(out).all()
    assert native.fallbacks[("_scaled_dot_product_flash_attention", "dropout")] == 1
