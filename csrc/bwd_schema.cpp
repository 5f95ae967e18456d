// Schema of the backward operator. Backends register kernels with TORCH_LIBRARY_IMPL in their
// own files; the fake kernel and the autograd formula of fwd live in chiplet_fa/_ops.py.
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(chiplet_fa, m) {
  m.def(
      "bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor softmax_lse, "
      "float? softmax_scale=None, bool causal=False, str mapping=\"auto\", int num_xcds=-1, "
      "bool deterministic=False) -> (Tensor dq, Tensor dk, Tensor dv)");
}
