// The operator schemas. Backends register kernels with TORCH_LIBRARY_IMPL in their own files;
// the fake (meta) kernels and autograd formulas live in chiplet_fa/_ops.py and _autograd.py.
#include <torch/library.h>

TORCH_LIBRARY(chiplet_fa, m) {
  m.def(
      "fwd(Tensor q, Tensor k, Tensor v, float? softmax_scale=None, bool causal=False, "
      "str mapping=\"auto\", int num_xcds=-1) -> (Tensor out, Tensor softmax_lse)");
  m.def(
      "bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor softmax_lse, "
      "float? softmax_scale=None, bool causal=False, str mapping=\"auto\", int num_xcds=-1, "
      "bool deterministic=False) -> (Tensor dq, Tensor dk, Tensor dv)");
}
