// The torch-facing front end of chiplet_fa::fwd and fwd_varlen shared by every backend: argument
// checks, output allocation and FwdParams filling. Backends differ only in block_m and the kernel.
#pragma once
#include <optional>
#include <string>

#include <ATen/core/Tensor.h>

#include "kernels/fwd_params.h"
#include "ops/attention_checks.h"

namespace chiplet_fa {

struct FwdArgs {
  at::Tensor q, k, v;
  std::optional<double> softmax_scale;
  MaskArgs mask;
  std::string mapping;
  int64_t num_xcds;
  std::optional<VarlenArgs> varlen;  // a packed batch

  const char* op() const { return varlen ? "chiplet_fa.fwd_varlen" : "chiplet_fa.fwd"; }
};

// softmax_lse's dtype for q (LseOf in kernels/fwd_params.h): float64 for float64, else float32.
at::ScalarType lse_dtype(const at::Tensor& q);

// Validates args (clear errors naming the argument), allocates out like q (or checks the given
// one) and softmax_lse of lse_dtype(q) (dense (B, H_q, N_q), packed (H_q, T_q)), and returns params
// for a backend whose tiles are block_m rows tall and whose L2 domains are detected as `detected_xcds`.
FwdParams prepare_fwd(const FwdArgs& args, int block_m, int detected_xcds, at::Tensor& out,
                      at::Tensor& softmax_lse, const std::optional<at::Tensor>& given_out = std::nullopt);

// Params for already checked inputs and allocated outputs (the backward reuses it for the
// forward tensors it is given).
FwdParams fwd_params(const FwdArgs& args, const AttentionDims& d, const at::Tensor& out,
                     const at::Tensor& softmax_lse, int block_m, int detected_xcds);

DType dtype_of(const at::Tensor& t);

// Sets the data pointers and strides of p (backends that re-lay inputs out call it again).
void point_at(FwdParams& p, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
              const at::Tensor& out);

// (batch, row, head) strides of a dense (4-D) or packed (3-D, batch stride 0) tensor.
struct Strides {
  int64_t batch, row, head;
};
Strides strides_of(const at::Tensor& t);

// An uninitialised tensor shaped like t but for its last dimension (the head dim), which is
// last_dim; of t's dtype unless dtype is given.
at::Tensor padded_like(const at::Tensor& t, int64_t last_dim, std::optional<at::ScalarType> dtype = std::nullopt);

// Fills results the kernels never see: nothing to compute (no query, no head), or no key at
// all (every row fully masked: out = 0, lse = -inf). Returns true when it did.
bool finish_without_kernel(const FwdParams& p, at::Tensor& out, at::Tensor& softmax_lse);

}  // namespace chiplet_fa
