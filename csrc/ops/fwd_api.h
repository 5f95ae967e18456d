// The torch-facing front end of chiplet_fa::fwd and fwd_varlen shared by every backend: argument
// checks, output allocation and FwdParams filling. Backends differ only in block_m and the kernel.
#pragma once
#include <optional>
#include <string>

#include "kernels/fwd_params.h"
#include "ops/attention_checks.h"
#include "ops/stable_tensor.h"

namespace chiplet_fa {

struct FwdArgs {
  Tensor q, k, v;
  std::optional<double> softmax_scale;
  MaskArgs mask;
  std::string mapping;
  int64_t num_xcds;
  std::optional<VarlenArgs> varlen;  // a packed batch

  const char* op() const { return varlen ? "chiplet_fa.fwd_varlen" : "chiplet_fa.fwd"; }
};

// softmax_lse's dtype for q (LseOf in kernels/fwd_params.h): float64 for float64, else float32.
ScalarType lse_dtype(const Tensor& q);

// Validates args (clear errors naming the argument), allocates out like q (or checks the given
// one) and softmax_lse of lse_dtype(q) (dense (B, H_q, N_q), packed (H_q, T_q)), and returns params
// for a backend whose tiles are block_m rows tall and whose L2 domains are detected as `detected_xcds`.
FwdParams prepare_fwd(const FwdArgs& args, int block_m, int detected_xcds, Tensor& out,
                      Tensor& softmax_lse, const OptTensor& given_out = std::nullopt);

// Params for already checked inputs and allocated outputs (the backward reuses it for the
// forward tensors it is given).
FwdParams fwd_params(const FwdArgs& args, const AttentionDims& d, const Tensor& out,
                     const Tensor& softmax_lse, int block_m, int detected_xcds);

// float16, bfloat16, float32 or float64; else a ValueError.
DType dtype_of(const Tensor& t);
DType dtype_of(ScalarType t);

// Sets the data pointers and strides of p (backends that re-lay inputs out call it again).
void point_at(FwdParams& p, const Tensor& q, const Tensor& k, const Tensor& v,
              const Tensor& out);

// (batch, row, head) strides of a dense (4-D) or packed (3-D, batch stride 0) tensor.
struct Strides {
  int64_t batch, row, head;
};
Strides strides_of(const Tensor& t);

// An uninitialised tensor shaped like t but for its last dimension (the head dim), which is
// last_dim; of t's dtype unless dtype is given.
Tensor padded_like(const Tensor& t, int64_t last_dim, std::optional<ScalarType> dtype = std::nullopt);

// Fills results the kernels never see: nothing to compute (no query, no head), or no key at
// all (every row fully masked: out = 0, lse = -inf). Returns true when it did.
bool finish_without_kernel(const FwdParams& p, Tensor& out, Tensor& softmax_lse);

}  // namespace chiplet_fa
