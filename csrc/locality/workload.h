// The FA2 forward as a stream of K/V tile reads: the shape of one attention call and the
// tiling of the kernel that runs it. Framework-free.
#pragma once
#include <algorithm>
#include <cstdint>

#include "mapping/mapping.h"

namespace chiplet_fa::locality {

struct AttnShape {
  int64_t batch, num_q_heads, num_kv_heads, seqlen_q, seqlen_k, head_dim;
  int32_t elem_bytes = 2;
  bool causal = false;
  int32_t block_m = 128;  // query rows per workgroup (GPU kernel)
  int32_t block_n = 64;   // keys per K/V step

  int64_t num_m_blocks() const { return (seqlen_q + block_m - 1) / block_m; }
  int64_t num_n_blocks() const { return (seqlen_k + block_n - 1) / block_n; }
  int64_t group() const { return num_q_heads / num_kv_heads; }
  int64_t grid() const { return batch * num_q_heads * num_m_blocks(); }
  // One K/V step reads this many K/V tiles (one of K, one of V), of tile_bytes each. A row of
  // one head is a separate run of head_dim * elem_bytes bytes (heads interleave), so each row
  // occupies whole lines.
  int64_t row_bytes(int32_t line_bytes) const {
    return (head_dim * elem_bytes + line_bytes - 1) / line_bytes * line_bytes;
  }
  int64_t kv_tile_bytes(int32_t line_bytes) const { return int64_t(block_n) * row_bytes(line_bytes); }
  int64_t q_tile_bytes(int64_t m_block, int32_t line_bytes) const {
    return std::min<int64_t>(block_m, seqlen_q - m_block * block_m) * row_bytes(line_bytes);
  }
  // K/V steps of the tile in m_block: every key block, or with the bottom-right causal mask
  // only those up to the last row's limit.
  int64_t steps(int64_t m_block) const {
    if (!causal) return num_n_blocks();
    const int64_t last_row = std::min<int64_t>(seqlen_q, (m_block + 1) * block_m) - 1;
    const int64_t keys = std::clamp<int64_t>(last_row + seqlen_k - seqlen_q + 1, 0, seqlen_k);
    return (keys + block_n - 1) / block_n;
  }
  double mean_steps() const {
    if (num_m_blocks() == 0) return 0.0;
    int64_t total = 0;
    for (int64_t m = 0; m < num_m_blocks(); ++m) total += steps(m);
    return double(total) / double(num_m_blocks());
  }
  // Attention compute cluster (one KV head of one batch) that a tile belongs to.
  int64_t acc_of(const Tile& t) const { return int64_t(t.batch) * num_kv_heads + t.q_head / group(); }
  GridShape grid_shape(int32_t mapping_xcds) const {
    return GridShape{int32_t(batch), int32_t(num_q_heads), int32_t(num_m_blocks()), mapping_xcds};
  }
};

// Throws std::invalid_argument naming the field when the shape is not a valid attention call.
void validate(const AttnShape& s);

}  // namespace chiplet_fa::locality
