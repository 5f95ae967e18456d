// The torch-facing front end of chiplet_fa::bwd and bwd_varlen shared by every backend: argument
// checks, gradient allocation and BwdParams filling. Backends differ only in tile sizes and kernels.
#pragma once
#include <optional>
#include <string>

#include "kernels/bwd_params.h"
#include "ops/fwd_api.h"
#include "ops/stable_tensor.h"

namespace chiplet_fa {

struct BwdArgs {
  Tensor dout, q, k, v, out, softmax_lse;
  std::optional<double> softmax_scale;
  MaskArgs mask;
  std::string mapping;
  int64_t num_xcds;
  bool deterministic;
  std::optional<VarlenArgs> varlen;  // a packed batch

  const char* op() const { return varlen ? "chiplet_fa.bwd_varlen" : "chiplet_fa.bwd"; }
  FwdArgs fwd() const { return FwdArgs{q, k, v, softmax_scale, mask, mapping, num_xcds, varlen}; }
};

// Gradients and the accumulator-typed scratch the kernels write.
struct BwdTensors {
  Tensor dk, dv;      // like k and v
  // Like q (its head dim padded as the kernels' is), contiguous, float (double for fp64 inputs;
  // int32 for fixed-point dQ); uninitialised: the CPU path clears it, the GPU kernels'
  // preprocess (dense) or their binding (packed).
  Tensor dq_accum;
  Tensor softmax_d;   // one row per query row padded to blocks of row_pad (bwd_params.h)
};

// Validates args (clear errors naming the argument), allocates the tensors and returns params
// for a backend whose main-kernel workgroups own block_n keys, whose dQ-pass tiles are block_m
// rows tall and whose per-row buffers are padded to a multiple of row_pad rows per sequence, on a
// device with `detected_xcds` L2 domains; fixed_point_dq: dq_accum in int32 (BwdParams::dq_scale);
// dq_cols: dq_accum's columns (0: q's head dim), the head dim the kernels pad to.
BwdParams prepare_bwd(const BwdArgs& args, int block_m, int block_n, int row_pad, int detected_xcds,
                      BwdTensors& tensors, bool fixed_point_dq = false, int64_t dq_cols = 0);

// Sets the gradient pointers and strides of p (backends that re-lay tensors out call it again;
// dq_accum must be contiguous with p.head_dim columns).
void point_grads_at(BwdParams& p, const Tensor& dout, const Tensor& dk,
                    const Tensor& dv, const Tensor& dq_accum);

}  // namespace chiplet_fa
