"""The op under torch.library.opcheck and torch.compile(fullgraph=True), static and dynamic."""
import pytest
import torch

import chiplet_fa
from devices import DEVICES


def make_qkv(device, batch, seqlen_q, seqlen_k, num_q_heads, num_kv_heads, head_dim, dtype):
    gen = torch.Generator().manual_seed(seqlen_q * 1000 + seqlen_k)
    q = torch.randn(batch, seqlen_q, num_q_heads, head_dim, generator=gen)
    k = torch.randn(batch, seqlen_k, num_kv_heads, head_dim, generator=gen)
    v = torch.randn(batch, seqlen_k, num_kv_heads, head_dim, generator=gen)
    return tuple(t.to(device, dtype) for t in (q, k, v))


OPCHECK_CASES = [
    ((1, 70, 70, 4, 4, 32), {}),
    ((2, 65, 130, 6, 2, 24), {"causal": True}),
    ((1, 130, 40, 4, 1, 8), {"causal": True, "softmax_scale": 0.5, "mapping": "swizzled_block_first",
                             "num_xcds": 3}),
    ((0, 16, 16, 2, 2, 16), {}),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape, kwargs", OPCHECK_CASES)
def test_opcheck(device, shape, kwargs):
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    q, k, v = make_qkv(device, *shape, dtype)  # no requires_grad: autograd is registered later
    torch.library.opcheck(torch.ops.chiplet_fa.fwd.default, (q, k, v), kwargs,
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))


class TinyAttention(torch.nn.Module):
    """A projection around the op, so the compiled graph holds more than the custom op."""

    def __init__(self, dim, num_heads, num_kv_heads):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, dim // num_heads
        self.qkv = torch.nn.Linear(dim, (num_heads + 2 * num_kv_heads) * self.head_dim)

    def forward(self, x):
        batch, seqlen, _ = x.shape
        q, k, v = self.qkv(x).split([self.num_heads * self.head_dim,
                                     self.num_kv_heads * self.head_dim,
                                     self.num_kv_heads * self.head_dim], dim=-1)
        q = q.view(batch, seqlen, self.num_heads, self.head_dim)
        k = k.view(batch, seqlen, self.num_kv_heads, self.head_dim)
        v = v.view(batch, seqlen, self.num_kv_heads, self.head_dim)
        return chiplet_fa.attention(q, k, v, causal=True).flatten(2).relu()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dynamic", [False, True])
def test_compiled_module_matches_eager_without_graph_breaks(device, dynamic):
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    model = TinyAttention(64, 4, 2).to(device, dtype).eval()
    compiled = torch.compile(model, fullgraph=True, dynamic=dynamic)
    lengths = (70, 33, 129) if dynamic else (70,)
    with torch.no_grad():
        for seqlen in lengths:
            x = torch.randn(2, seqlen, 64, device=device, dtype=dtype)
            # Inductor may fuse the projection differently: a rounding step apart in bf16.
            tol = {} if dtype == torch.float32 else {"atol": 2e-2, "rtol": 2e-2}
            torch.testing.assert_close(compiled(x), model(x), **tol)
    if dynamic:
        # One graph, with a symbolic sequence length, serves every length.
        assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
