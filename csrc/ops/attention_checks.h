// Argument checks shared by the forward and backward front ends, dense and packed (variable-length)
// layouts. `op` ("chiplet_fa.fwd", "chiplet_fa.bwd_varlen", ...) starts every message so users
// see which call was wrong; every message names the argument.
#pragma once
#include <algorithm>
#include <cstdint>
#include <optional>

#include "ops/stable_tensor.h"

namespace chiplet_fa {

// A packed batch: rows of sequence b are [cu_seqlens[b], cu_seqlens[b + 1]).
struct VarlenArgs {
  Tensor cu_seqlens_q, cu_seqlens_k;
  int64_t max_seqlen_q, max_seqlen_k;
};

// How scores are capped, biased and masked (flash-attention's window_size, softcap, alibi_slopes).
struct MaskArgs {
  bool causal = false;
  int64_t window_left = -1, window_right = -1;  // -1: unbounded
  double softcap = 0.0;                         // 0: none
  OptTensor alibi_slopes;       // float32 (H_q,) or (B, H_q)
};

// A mask into a kernel's params (FwdParams, DecodeParams: the same field names). flash-attention's
// window: causal is right = 0; a side of -1 (or one reaching past `unbounded`) is unbounded, held as
// `unbounded` (the forward's N_q + N_k keeps its window arithmetic in int32; decoding's kernel
// computes in int64 and takes INT32_MAX).
template <class Params>
void set_mask(Params& p, const MaskArgs& m, int64_t unbounded) {
  const int64_t right = m.causal ? 0 : m.window_right;
  p.windowed = m.causal || m.window_left >= 0 || m.window_right >= 0;
  p.window_left = int32_t(m.window_left < 0 ? unbounded : std::min(m.window_left, unbounded));
  p.window_right = int32_t(right < 0 ? unbounded : std::min(right, unbounded));
  p.softcap = float(m.softcap);
  if (m.alibi_slopes) {
    p.alibi_slopes = m.alibi_slopes->template mutable_data_ptr<float>();
    p.alibi_batch_stride = m.alibi_slopes->dim() == 2 ? m.alibi_slopes->stride(0) : 0;
  }
}

struct AttentionDims {
  int64_t batch, seqlen_q, seqlen_k, num_q_heads, num_kv_heads, head_dim;
  int64_t total_q, total_k;  // rows of the packed tensors (dense: batch * seqlen)
  bool packed;
};

// Dense: q (B, N_q, H_q, D), k/v (B, N_k, H_kv, D). Packed (varlen given): q (T_q, H_q, D),
// k/v (T_k, H_kv, D), cu_seqlens int32 (B + 1) on q's device, max lengths >= 0. Both: one
// supported dtype and device, contiguous last dimension, H_q a multiple of H_kv, D in 1..256,
// lengths below 2^29. On the CPU the cu_seqlens values are checked too (starting at 0,
// non-decreasing, ending at T, no sequence longer than its max); a GPU checks them in its
// launch code without a host sync.
AttentionDims check_qkv(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                        const std::optional<VarlenArgs>& varlen);

// softmax_scale finite when given; num_xcds -1 (detect) or >= 1; window sides >= -1; softcap
// finite and >= 0; alibi_slopes float32 (H_q,) or (B, H_q) on q's device.
void check_options(const char* op, std::optional<double> softmax_scale, int64_t num_xcds,
                   const MaskArgs& mask, const AttentionDims& d, const Tensor& q);

// `t` has the shape, dtype and device of `ref` and a contiguous last dimension.
void check_like(const char* op, const Tensor& t, const char* name, const Tensor& ref,
                const char* ref_name);

}  // namespace chiplet_fa
