// Argument checks shared by the forward and backward front ends. `op` ("chiplet_fa.fwd",
// "chiplet_fa.bwd") starts every message so users see which call was wrong.
#pragma once
#include <cstdint>
#include <optional>

#include <ATen/core/Tensor.h>

namespace chiplet_fa {

struct AttentionDims {
  int64_t batch, seqlen_q, seqlen_k, num_q_heads, num_kv_heads, head_dim;
};

// q (B, N_q, H_q, D), k/v (B, N_k, H_kv, D): one supported dtype, one device, contiguous last
// dimension, H_q a multiple of H_kv, D in 1..256, B/N within int32.
AttentionDims check_qkv(const char* op, const at::Tensor& q, const at::Tensor& k,
                        const at::Tensor& v);

// softmax_scale finite when given; num_xcds -1 (detect) or >= 1.
void check_options(const char* op, std::optional<double> softmax_scale, int64_t num_xcds);

// `t` has the shape, dtype and device of `ref` and a contiguous last dimension.
void check_like(const char* op, const at::Tensor& t, const char* name, const at::Tensor& ref,
                const char* ref_name);

}  // namespace chiplet_fa
