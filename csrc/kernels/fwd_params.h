// Everything a forward kernel needs, as raw pointers and element strides, so kernels stay
// free of any framework type. Layouts follow flash-attention:
//   dense batch:     q/out (B, N_q, H_q, D), k/v (B, N_k, H_kv, D), softmax_lse (B, H_q, N_q);
//   variable length: q/out (T_q, H_q, D), k/v (T_k, H_kv, D) packed, sequence b being rows
//                    [cu_seqlens_q[b], cu_seqlens_q[b+1]) (and likewise for k/v), softmax_lse
//                    (H_q, T_q); batch strides are 0 and seqlen_q/seqlen_k the longest sequence.
// Scores of query row i and key j of one sequence (offset = N_k - N_q, bottom-right aligned):
//   s = scale * q_i.k_j;  softcap c > 0: s = c * tanh(s / c);  ALiBi: s -= slope * |i + offset - j|;
// keys outside the window [i + offset - left, i + offset + right] are masked (causal: right = 0).
#pragma once
#include <cstdint>

#include "arch/dtype.h"
#include "kernels/tail_split.h"
#include "mapping/mapping.h"

namespace chiplet_fa {

// softmax_lse's element type for inputs of type T: float32, float64 for float64 inputs (the CPU
// path) so that their gradients keep float64's precision.
template <typename T>
struct LseOf {
  using type = float;
};
template <>
struct LseOf<double> {
  using type = double;
};

// The rows of one sequence of the batch.
struct Sequence {
  int32_t len_q, len_k;
  int64_t q_start, k_start;  // first row in the packed layout (0 in a dense batch)
};

// The keys query row i (of one sequence) sees: [i + offset - left, i + offset + right] within
// [0, len_k), offset = len_k - len_q. Unbounded sides hold len_q + len_k or more, which bounds
// nothing.
struct KeyWindow {
  int32_t offset, left, right, len_k;

  CFA_HOST_DEVICE int32_t begin(int32_t row) const {
    const int32_t b = row + offset - left;
    return b > 0 ? b : 0;
  }
  CFA_HOST_DEVICE int32_t end(int32_t row) const {  // one past the last visible key
    const int32_t e = row + offset + right + 1;
    return e < len_k ? (e > 0 ? e : 0) : len_k;
  }
  CFA_HOST_DEVICE bool visible(int32_t row, int32_t col) const {
    return col >= row + offset - left && col <= row + offset + right && col < len_k;
  }
  // Query rows [first_row(n0), end_row(n1)) see some key of [n0, n1) (begin/end grow with the row).
  CFA_HOST_DEVICE int32_t first_row(int32_t n0) const {
    const int32_t r = n0 - offset - right;
    return r > 0 ? r : 0;
  }
  CFA_HOST_DEVICE int32_t end_row(int32_t n1) const {
    const int32_t r = n1 - offset + left, len_q = len_k - offset;
    return r < len_q ? r : len_q;
  }
};

// Blocks [first, end) of `block` keys (or rows) a tile visits.
struct BlockRange {
  int32_t first, end;
};
// The key blocks that query rows row_first..row_last of a sequence see.
CFA_HOST_DEVICE BlockRange key_blocks(const KeyWindow& w, int32_t row_first, int32_t row_last, int32_t block) {
  const int32_t first = w.begin(row_first) / block, end = (w.end(row_last) + block - 1) / block;
  return {first, end > first ? end : first};
}
// The query blocks whose rows see some key of [n0, n1).
CFA_HOST_DEVICE BlockRange query_blocks(const KeyWindow& w, int32_t n0, int32_t n1, int32_t block) {
  const int32_t first = w.first_row(n0) / block, end = (w.end_row(n1) + block - 1) / block;
  return {first, end > first ? end : first};
}

struct FwdParams {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  void* softmax_lse;  // LseOf<T>::type

  int64_t q_batch_stride, q_row_stride, q_head_stride;
  int64_t k_batch_stride, k_row_stride, k_head_stride;
  int64_t v_batch_stride, v_row_stride, v_head_stride;
  int64_t o_batch_stride, o_row_stride, o_head_stride;
  int64_t lse_batch_stride, lse_head_stride;

  int32_t batch, seqlen_q, seqlen_k, num_q_heads, num_kv_heads, head_dim;
  double softmax_scale;  // kernels round it to their accumulator type

  // Variable-length batch (nullptr: dense): cu_seqlens_* have batch + 1 entries.
  const int32_t* cu_seqlens_q;
  const int32_t* cu_seqlens_k;
  int64_t total_q, total_k;  // rows of q and k (dense: batch * seqlen)
  // Ragged grid of the pass that reads these params (batch + 1 entries, see GridShape), written by
  // the launch code before the kernel; nullptr for a dense batch.
  int32_t* block_offsets;
  // Work-queue counters of a persistent kernel (one per L2 domain it serves, at most num_xcds),
  // zeroed by the launch code; nullptr for the families that launch one workgroup per tile.
  int32_t* tile_counters;
  // Device memory the launch code may ask of the binding: bytes, stream-ordered, alive until the
  // binding returns (nullptr get: none to give). The sm90 forward's tail split takes its slots there.
  struct Scratch {
    void* owner;
    void* (*get)(void* owner, int64_t bytes);
  } scratch;
  FwdTailSplit split;  // the launch code's plan (kernels/tail_split.h); units == 0 in the others

  bool windowed;                     // a window (or causal mask) applies; else window_* are unused
  int32_t window_left, window_right;  // seqlen_k where unbounded
  float softcap;                      // 0: none
  const float* alibi_slopes;          // nullptr: none; slope of (b, h) at b * alibi_batch_stride + h
  int64_t alibi_batch_stride;

  Mapping mapping;
  int32_t num_xcds;
  int32_t block_m;  // rows per tile of the backend that runs: fixes num_m_blocks

  CFA_HOST_DEVICE int32_t num_m_blocks() const { return (seqlen_q + block_m - 1) / block_m; }
  // Rows of a longest-first section (GridShape::longest_first_rows) of the grid the launched pass
  // walks (the backward's main pass: its key-block grid): 1 unless the launch code knows how many
  // tiles run at once (the sm90 kernels, kernels/sm90/tile_scheduler.h).
  int32_t section_rows;

  // A key window bounded on the right (causal, sliding) gives later query blocks more keys, so
  // head-first orders hand tiles out longest first.
  CFA_HOST_DEVICE bool longest_first() const { return windowed && window_right < seqlen_k; }
  CFA_HOST_DEVICE GridShape grid_shape() const {
    return GridShape{batch, num_q_heads, num_m_blocks(), num_xcds, block_offsets, longest_first() ? section_rows : 0};
  }
  // Workgroups to launch: the grid, or for a ragged one a bound the host knows without reading
  // cu_seqlens (sum_b ceil(len_b / block) <= ceil(T / block) + batch); those past the grid exit.
  CFA_HOST_DEVICE int64_t launch_size(const GridShape& g, int64_t total_rows, int32_t block) const {
    if (!g.block_offsets) return grid_size(g);
    const int64_t dense = int64_t(g.batch) * g.num_m_blocks, packed = (total_rows + block - 1) / block + g.batch;
    return int64_t(g.num_q_heads) * (dense < packed ? dense : packed);
  }
  CFA_HOST_DEVICE int32_t group_size() const { return num_q_heads / num_kv_heads; }

  CFA_HOST_DEVICE Sequence sequence(int32_t b) const {
    if (!cu_seqlens_q) return Sequence{seqlen_q, seqlen_k, 0, 0};
    const int32_t q0 = cu_seqlens_q[b], k0 = cu_seqlens_k[b];
    return Sequence{cu_seqlens_q[b + 1] - q0, cu_seqlens_k[b + 1] - k0, q0, k0};
  }
  CFA_HOST_DEVICE KeyWindow key_window(const Sequence& s) const {
    const int32_t unbounded = s.len_q + s.len_k;
    return KeyWindow{s.len_k - s.len_q, windowed ? window_left : unbounded, windowed ? window_right : unbounded,
                     s.len_k};
  }
  CFA_HOST_DEVICE float alibi_slope(int32_t b, int32_t q_head) const {
    return alibi_slopes ? alibi_slopes[b * alibi_batch_stride + q_head] : 0.f;
  }

  // Where one (sequence, query head)'s slabs start, as element type T; GQA picks the KV head by
  // index. Rows are then row_stride apart.
  template <typename T>
  struct HeadSlabs {
    const T* q;
    const T* k;
    const T* v;
    T* out;
    typename LseOf<T>::type* lse;
  };
  template <typename T>
  CFA_HOST_DEVICE HeadSlabs<T> head_slabs(int32_t b, int32_t q_head, const Sequence& s) const {
    const int32_t kv_head = q_head / group_size();
    return {static_cast<const T*>(q) + b * q_batch_stride + s.q_start * q_row_stride + q_head * q_head_stride,
            static_cast<const T*>(k) + b * k_batch_stride + s.k_start * k_row_stride + kv_head * k_head_stride,
            static_cast<const T*>(v) + b * v_batch_stride + s.k_start * v_row_stride + kv_head * v_head_stride,
            static_cast<T*>(out) + b * o_batch_stride + s.q_start * o_row_stride + q_head * o_head_stride,
            static_cast<typename LseOf<T>::type*>(softmax_lse) + b * lse_batch_stride + q_head * lse_head_stride +
                s.q_start};
  }
};

}  // namespace chiplet_fa
