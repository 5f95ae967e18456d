// The torch-facing front end of chiplet_fa::fwd_kvcache (flash-attention's flash_attn_with_kvcache)
// shared by every backend: argument checks, the host-side value checks a CPU call can afford, and
// DecodeParams filling.
#pragma once
#include <optional>
#include <string>

#include "kernels/decode/decode_params.h"
#include "ops/attention_checks.h"
#include "ops/stable_tensor.h"

namespace chiplet_fa {

struct DecodeArgs {
  Tensor q, k_cache, v_cache;
  OptTensor k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx, cache_leftpad, block_table;
  std::optional<double> softmax_scale;
  MaskArgs mask;
  bool rotary_interleaved;
  int64_t num_splits;
  std::string mapping;
  int64_t num_xcds;

  static constexpr const char* kOp = "chiplet_fa.fwd_kvcache";
  bool paged() const { return block_table.has_value(); }
};

struct DecodeDims {
  int64_t batch, seqlen_q, seqlen_new, num_q_heads, num_kv_heads, head_dim;
  int64_t cache_entries, cache_rows;  // (B_cache, N_cache), or (num_pages, page_size)
  int64_t pages_per_seq;              // block_table's columns (paged)
  int64_t capacity;                   // keys a sequence's cache holds
  int64_t rotary_dim, seqlen_ro;
};

// Shapes, dtypes and devices of every argument, with ValueErrors naming it.
DecodeDims check_decode(const DecodeArgs& a);

// The values only a CPU tensor shows the host (cache_seqlens, cache_leftpad, cache_batch_idx, the
// block table's pages in use, rotary positions): a ValueError for any that points outside the
// cache. On a GPU the decoding kernels' first step checks them (kernels/decode/decode_prepare.h).
void check_decode_values(const DecodeArgs& a, const DecodeDims& d);

// Entry b of a 1-D int32 CPU tensor (cache_seqlens, cache_batch_idx, cache_leftpad), fallback when
// it is not given.
int64_t host_value(const OptTensor& t, int64_t b, int64_t fallback);

// Params with every pointer but the outputs and scratch set; heads_per_tile, block_m and
// num_splits as given.
DecodeParams decode_params(const DecodeArgs& a, const DecodeDims& d, int detected_xcds);

// The split count: num_splits when given (>= 1), else enough workgroups to fill `units` compute
// units twice over, with splits of at least four key blocks of block_n keys.
int decode_splits(const DecodeArgs& a, const DecodeDims& d, int64_t tiles, int units, int block_n);

}  // namespace chiplet_fa
