// The fwd_kvcache operator's C++ signature (as ops/schema.cpp declares it) turned into DecodeArgs
// for a backend: Decode(const DecodeArgs&) -> (out, softmax_lse).
#pragma once
#include <optional>
#include <string>
#include <tuple>

#include "ops/decode_api.h"
#include "ops/stable_tensor.h"

namespace chiplet_fa {

using DecodeResult = std::tuple<Tensor, Tensor>;

template <DecodeResult (*kDecode)(const DecodeArgs&)>
struct DecodeEntry {
  static DecodeResult fwd_kvcache(const Tensor& q, Tensor& k_cache, Tensor& v_cache, const OptTensor& k,
                                  const OptTensor& v, const OptTensor& rotary_cos, const OptTensor& rotary_sin,
                                  const OptTensor& cache_seqlens, const OptTensor& cache_batch_idx,
                                  const OptTensor& cache_leftpad, const OptTensor& block_table,
                                  std::optional<double> softmax_scale, bool causal, int64_t window_left,
                                  int64_t window_right, double softcap, const OptTensor& alibi_slopes,
                                  bool rotary_interleaved, int64_t num_splits, std::string mapping, int64_t num_xcds) {
    return kDecode(DecodeArgs{q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
                              cache_leftpad, block_table, softmax_scale,
                              MaskArgs{causal, window_left, window_right, softcap, alibi_slopes}, rotary_interleaved,
                              num_splits, std::move(mapping), num_xcds});
  }
};

}  // namespace chiplet_fa
