// The FA2 forward as a stream of K/V tile reads: the shape of one attention call and the
// tiling of the kernel that runs it. Framework-free.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "mapping/mapping.h"

namespace chiplet_fa::locality {

struct AttnShape {
  int64_t batch, num_q_heads, num_kv_heads, seqlen_q, seqlen_k, head_dim;
  int32_t elem_bytes = 2;
  bool causal = false;
  int32_t block_m = 128;  // query rows per workgroup (GPU kernel)
  int32_t block_n = 64;   // keys per K/V step
  // A packed (variable-length) batch: the length of each sequence, batch entries each, both given
  // or both empty. Empty: every sequence has seqlen_q / seqlen_k. Given, the grid is the kernels'
  // ragged grid (sequence b has ceil(seqlens_q[b] / block_m) m-blocks per q head), each tile's K/V
  // steps come from its own sequence, and seqlen_q / seqlen_k are only bounds (the op's
  // max_seqlen: at least the longest sequence); the prediction depends on the lengths alone.
  std::vector<int64_t> seqlens_q = {}, seqlens_k = {};

  bool varlen() const { return !seqlens_q.empty() || !seqlens_k.empty(); }
  int64_t len_q(int64_t b) const { return seqlens_q.empty() ? seqlen_q : seqlens_q[size_t(b)]; }
  int64_t len_k(int64_t b) const { return seqlens_k.empty() ? seqlen_k : seqlens_k[size_t(b)]; }
  int64_t m_blocks(int64_t b) const { return (len_q(b) + block_m - 1) / block_m; }
  // m-blocks of the longest sequence (GridShape::num_m_blocks), and of all sequences together.
  int64_t num_m_blocks() const {
    if (!varlen()) return m_blocks(0);
    int64_t most = 0;
    for (int64_t b = 0; b < batch; ++b) most = std::max(most, m_blocks(b));
    return most;
  }
  int64_t total_m_blocks() const {
    if (!varlen()) return batch * m_blocks(0);
    int64_t total = 0;
    for (int64_t b = 0; b < batch; ++b) total += m_blocks(b);
    return total;
  }
  // Key blocks of the longest key sequence: every (ACC, step) pair is acc * num_n_blocks + step.
  int64_t num_n_blocks() const {
    int64_t most = varlen() ? 0 : seqlen_k;
    for (int64_t b = 0; varlen() && b < batch; ++b) most = std::max(most, len_k(b));
    return (most + block_n - 1) / block_n;
  }
  int64_t group() const { return num_q_heads / num_kv_heads; }
  int64_t grid() const { return num_q_heads * total_m_blocks(); }
  // One K/V step reads this many K/V tiles (one of K, one of V), of tile_bytes each. A row of
  // one head is a separate run of head_dim * elem_bytes bytes (heads interleave), so each row
  // occupies whole lines.
  int64_t row_bytes(int32_t line_bytes) const {
    return (head_dim * elem_bytes + line_bytes - 1) / line_bytes * line_bytes;
  }
  int64_t kv_tile_bytes(int32_t line_bytes) const { return int64_t(block_n) * row_bytes(line_bytes); }
  int64_t q_tile_bytes(const Tile& t, int32_t line_bytes) const {
    return std::min<int64_t>(block_m, len_q(t.batch) - int64_t(t.m_block) * block_m) * row_bytes(line_bytes);
  }
  // K/V steps of m-block m of sequence b: every key block of the sequence, or with the
  // bottom-right causal mask (per sequence) only those up to the last row's limit.
  int64_t steps(int64_t b, int64_t m) const {
    const int64_t n_q = len_q(b), n_k = len_k(b);
    int64_t keys = n_k;
    if (causal) keys = std::clamp<int64_t>(std::min<int64_t>(n_q, (m + 1) * block_m) + n_k - n_q, 0, n_k);
    return (keys + block_n - 1) / block_n;
  }
  int64_t steps(const Tile& t) const { return steps(t.batch, t.m_block); }
  // K/V steps of the tiles of one q head over the whole batch, and per tile on average.
  int64_t total_steps() const {
    auto of_sequence = [&](int64_t b) {
      int64_t total = 0;
      for (int64_t m = 0; m < m_blocks(b); ++m) total += steps(b, m);
      return total;
    };
    if (!varlen()) return batch ? batch * of_sequence(0) : 0;
    int64_t total = 0;
    for (int64_t b = 0; b < batch; ++b) total += of_sequence(b);
    return total;
  }
  double mean_steps() const {
    const int64_t blocks = total_m_blocks();
    return blocks ? double(total_steps()) / double(blocks) : 0.0;
  }
  // Attention compute cluster (one KV head of one sequence) that a tile belongs to.
  int64_t acc_of(const Tile& t) const { return int64_t(t.batch) * num_kv_heads + t.q_head / group(); }
  // The grid the kernels run: ragged for a packed batch, its block offsets held in `offsets`
  // (which must outlive the GridShape; left empty for a uniform batch); a causal grid walks
  // sections of section_rows rows longest first.
  GridShape grid_shape(int32_t mapping_xcds, std::vector<int32_t>& offsets, int32_t section_rows) const {
    offsets.clear();
    if (varlen()) {
      offsets.push_back(0);
      for (int64_t b = 0; b < batch; ++b) offsets.push_back(int32_t(offsets.back() + m_blocks(b)));
    }
    return GridShape{int32_t(batch), int32_t(num_q_heads), int32_t(num_m_blocks()), mapping_xcds,
                     offsets.empty() ? nullptr : offsets.data(), causal ? section_rows : 0};
  }
};

// Throws std::invalid_argument naming the field when the shape is not a valid attention call.
void validate(const AttnShape& s);

// The shape the op's mapping="auto" decides with for a packed batch whose dense fields (batch,
// seqlen_q/seqlen_k = max_seqlen) are set: with cu_seqlens_q/k readable on the host (batch + 1
// entries each; CPU tensors) the exact per-sequence lengths; without (nullptr: on a GPU, where
// reading them would need a device-to-host copy) or when they are not a packing of total_q/total_k
// rows into sequences no longer than max_seqlen, batch sequences of the mean length (rounded up).
void describe_packed(AttnShape& s, const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_k, int64_t total_q,
                     int64_t total_k);

}  // namespace chiplet_fa::locality
