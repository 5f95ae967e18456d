// The torch-facing front end of chiplet_fa::fwd shared by every backend: argument checks,
// output allocation and FwdParams filling. Backends differ only in block_m and the kernel.
#pragma once
#include <optional>
#include <string>
#include <tuple>

#include <ATen/core/Tensor.h>

#include "kernels/fwd_params.h"

namespace chiplet_fa {

struct FwdArgs {
  at::Tensor q, k, v;
  std::optional<double> softmax_scale;
  bool causal;
  std::string mapping;
  int64_t num_xcds;
};

// Validates args (clear errors naming the argument), allocates out (B, N_q, H_q, D) and
// softmax_lse (B, H_q, N_q) float32, and returns params for a backend whose tiles are
// block_m rows tall and whose L2 domains are detected as `detected_xcds`.
FwdParams prepare_fwd(const FwdArgs& args, int block_m, int detected_xcds, at::Tensor& out,
                      at::Tensor& softmax_lse);

// Params for already checked inputs and allocated outputs (the backward reuses it for the
// forward tensors it is given).
FwdParams fwd_params(const FwdArgs& args, const at::Tensor& out, const at::Tensor& softmax_lse,
                     int block_m, int detected_xcds);

DType dtype_of(const at::Tensor& t);

// Sets the data pointers and strides of p (backends that re-lay inputs out call it again).
void point_at(FwdParams& p, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
              const at::Tensor& out);

// Fills results the kernels never see: nothing to compute (empty batch, heads or N_q), or no
// keys at all (every row fully masked: out = 0, lse = -inf). Returns true when it did.
bool finish_without_kernel(const FwdParams& p, at::Tensor& out, at::Tensor& softmax_lse);

}  // namespace chiplet_fa
