// Split-KV decoding (flash-decoding) over a contiguous or paged cache, written once over the arch
// interface. A workgroup is one warp: its 16-row tile holds (token, query head) pairs of one KV
// head's group (GQA packing: the group's heads read the same K/V rows once), and it walks one
// split of the sequence's key blocks. Which (sequence, group, rows, split) comes from
// map_workgroup, so a group's row blocks and splits share an L2 domain. With one split the output
// is written directly; otherwise each split writes a normalised partial and its log-sum-exp, and
// decode_combine_kernel merges them.
#pragma once
#include <cmath>

#include "arch/arch.h"
#include "kernels/decode/decode_params.h"
#include "kernels/online_softmax.h"
#include "kernels/scores.h"
#include "kernels/tile_sizes.h"

namespace chiplet_fa::CFA_FAMILY {

template <DType kDType, int kHeadDim>
struct DecodeKernel {
  using T = typename arch::Element<kDType>::type;
  static constexpr int kDim = arch::padded_head_dim(kHeadDim);
  static constexpr FwdTiling kTiles = decode_tiling(kFamily, kDim);
  static constexpr int kBlockM = kTiles.block_m, kBlockN = kTiles.block_n, kThreads = arch::kWarpSize;
  static_assert(kTiles.m_tiles == 1 && kBlockM == 16, "one warp, one m-tile a workgroup");
  using QTile = arch::SmemTile<kBlockM, kDim>;
  using KVTile = arch::SmemTile<kBlockN, kDim>;
  static constexpr int kSmemBytes = (QTile::kElems + 2 * KVTile::kElems) * int(sizeof(T));
  using SAcc = arch::Acc<1, kBlockN>;
  using OAcc = arch::Acc<1, kDim>;
  static constexpr int kSlots = SAcc::kSlots;

  // What one workgroup computes.
  struct Work {
    int32_t b, group, row0, split;
    CacheSpan span;
    int32_t offset;  // the diagonal: token i sees key i + offset (bottom-right aligned)
  };

  static CFA_DEVICE Work work(const DecodeParams& p) {
    const Tile t = map_workgroup(p.mapping, blockIdx.x, p.grid_shape());
    const int32_t blocks = p.row_blocks();
    const CacheSpan span = p.span(t.batch);
    return Work{t.batch, t.q_head, (t.m_block % blocks) * kBlockM, t.m_block / blocks, span, span.end - p.seqlen_q};
  }

  // Keys [lo, hi) that token i sees.
  static CFA_DEVICE void visible(const DecodeParams& p, const Work& w, int32_t i, int64_t& lo, int64_t& hi) {
    lo = w.span.begin;
    hi = w.span.end;
    if (!p.windowed) return;
    const int64_t from = int64_t(i) + w.offset - p.window_left, to = int64_t(i) + w.offset + p.window_right + 1;
    lo = from > lo ? from : lo;
    hi = to < hi ? to : hi;
  }

  // This split's share [first, end) of the key blocks the tile's tokens see.
  static CFA_DEVICE BlockRange key_blocks(const DecodeParams& p, const Work& w) {
    const int32_t t0 = w.row0 / p.heads_per_tile, t1 = min(p.seqlen_q - 1, (w.row0 + kBlockM - 1) / p.heads_per_tile);
    int64_t lo, hi, lo1, hi1;
    visible(p, w, t0, lo, hi);
    visible(p, w, t1, lo1, hi1);
    hi = hi1;  // the window moves right with the token
    if (hi <= lo) return {0, 0};
    const int32_t first = int32_t(lo / kBlockN), blocks = int32_t((hi + kBlockN - 1) / kBlockN) - first;
    const int32_t per = (blocks + p.num_splits - 1) / p.num_splits;
    const int32_t begin = first + min(blocks, w.split * per);
    return {begin, first + min(blocks, (w.split + 1) * per)};
  }

  // Tile row r's query row (nullptr past the last token), for the copy.
  static CFA_DEVICE const T* query_row(const DecodeParams& p, const Work& w, const T* q, int r) {
    const int32_t row = w.row0 + r, token = row / p.heads_per_tile;
    if (token >= p.seqlen_q) return nullptr;
    const int32_t head = w.group * p.heads_per_tile + row % p.heads_per_tile;
    return q + w.b * p.q_batch_stride + token * p.q_row_stride + head * p.q_head_stride;
  }

  // Copies kRows rows into a shared tile, 16 bytes a piece; row_of(r) nullptr: zero-filled.
  template <typename Tile, typename RowOf>
  static CFA_DEVICE void load_rows(T* smem, RowOf row_of, const T* fallback, int head_dim) {
    constexpr int kChunks = Tile::kTileCols / 8;
    for (int c = threadIdx.x; c < Tile::kTileRows * kChunks; c += kThreads) {
      const int r = c / kChunks, col = (c % kChunks) * 8;
      const T* src = row_of(r);
      const bool valid = src && col < head_dim;
      arch::copy_16B_async(smem + Tile::offset(r, col), valid ? src + col : fallback, valid);
    }
  }

  static CFA_DEVICE void load_keys(const DecodeParams& p, const Work& w, T* smem, const void* cache, int64_t entry,
                                   int64_t row, int64_t head, int32_t n0) {
    const T* base = static_cast<const T*>(cache);
    const int32_t kv_head = w.group * p.heads_per_tile / (p.num_q_heads / p.num_kv_heads);
    load_rows<KVTile>(smem, [&](int r) -> const T* {
      const int32_t key = n0 + r;
      if (key < w.span.begin || key >= w.span.end) return nullptr;
      return p.cache_row(base, entry, row, head, w.b, w.span, key, kv_head);
    }, base, p.head_dim);
  }

  // Scores to logits, keys outside each row's window masked.
  static CFA_DEVICE void logits(const DecodeParams& p, const Work& w, const ScoreMod& mod, SAcc& s, int32_t n0,
                                int lane) {
    mod.to_logits(s, w.row0 / p.heads_per_tile, n0, lane);  // ALiBi packs one head a tile: row = token
    int64_t lo[kSlots], hi[kSlots];
#pragma unroll
    for (int r = 0; r < kSlots; ++r) visible(p, w, (w.row0 + arch::slot_row(r, lane)) / p.heads_per_tile, lo[r], hi[r]);
#pragma unroll
    for (int i = 0; i < SAcc::kSize; ++i) {
      const int64_t key = n0 + SAcc::col(i, lane);
      s.x[i] = key >= lo[SAcc::slot(i)] && key < hi[SAcc::slot(i)] ? s.x[i] : -INFINITY;
    }
  }

  static CFA_DEVICE void store(const DecodeParams& p, const Work& w, const OAcc& o, OnlineSoftmax<SAcc, OAcc, kBlockN, true>& sm,
                               int lane);

  static CFA_DEVICE void run(const DecodeParams& p, T* smem) {
    const Work w = work(p);
    const int lane = threadIdx.x;
    const T* q = static_cast<const T*>(p.rotary_dim > 0 ? p.q_rotated : p.q);
    const ScoreMod mod(p.softmax_scale, p.softcap, p.alibi_slope(w.b, w.group), w.offset);
    const BlockRange keys = key_blocks(p, w);
    T* sQ = smem;
    T* sK = sQ + QTile::kElems;
    T* sV = sK + KVTile::kElems;
    load_rows<QTile>(sQ, [&](int r) { return query_row(p, w, q, r); }, q, p.head_dim);
    if (keys.end > keys.first)
      load_keys(p, w, sK, p.k_cache, p.k_batch_stride, p.k_row_stride, p.k_head_stride, keys.first * kBlockN);
    arch::copy_commit();

    OAcc o;
#pragma unroll
    for (int i = 0; i < OAcc::kSize; ++i) o.x[i] = 0.f;
    OnlineSoftmax<SAcc, OAcc, kBlockN, true> softmax;
    for (int32_t nb = keys.first; nb < keys.end; ++nb) {
      const int32_t n0 = nb * kBlockN;
      arch::copy_wait<0>();  // K block nb (and Q on the first pass)
      arch::block_sync();
      load_keys(p, w, sV, p.v_cache, p.v_batch_stride, p.v_row_stride, p.v_head_stride, n0);
      arch::copy_commit();
      SAcc s;
      arch::gemm_qk<T, 1, kBlockN, kDim, kBlockM>(s, sQ, sK, 0, lane);
      logits(p, w, mod, s, n0, lane);
      arch::copy_wait<0>();  // V block nb
      arch::block_sync();
      if (nb + 1 < keys.end) {
        load_keys(p, w, sK, p.k_cache, p.k_batch_stride, p.k_row_stride, p.k_head_stride, n0 + kBlockN);
        arch::copy_commit();
      }
      softmax.update(s, o, 1.f);
      arch::PFrag<T, 1, kBlockN> pf;
      arch::pack_p(pf, s);
      arch::gemm_pv<T, 1, kBlockN, kDim>(o, pf, sV, 0, lane);
    }
    arch::copy_wait<0>();  // a split with no key never waited for its Q copy
    store(p, w, o, softmax, lane);
  }
};

// The tile's rows: out and softmax_lse with one split, else this split's partial and its lse.
template <DType kDType, int kHeadDim>
CFA_DEVICE void DecodeKernel<kDType, kHeadDim>::store(const DecodeParams& p, const Work& w, const OAcc& o,
                                                     OnlineSoftmax<SAcc, OAcc, kBlockN, true>& sm, int lane) {
  float inv_sum[kSlots];
  int64_t row_at[kSlots];  // (b, head, token) index of the slot's row in softmax_lse's layout; -1: padding
#pragma unroll
  for (int r = 0; r < kSlots; ++r) {
    const float sum = arch::row_allreduce_sum(sm.row_sum[r]);
    inv_sum[r] = sum > 0.f ? 1.f / sum : 0.f;
    const int32_t row = w.row0 + arch::slot_row(r, lane), token = row / p.heads_per_tile;
    const int32_t head = w.group * p.heads_per_tile + row % p.heads_per_tile;
    row_at[r] = token < p.seqlen_q ? (int64_t(w.b) * p.num_q_heads + head) * p.seqlen_q + token : -1;
    const float lse = sum > 0.f ? sm.row_max[r] * float(M_LN2) + logf(sum) : -INFINITY;
    if (arch::owns_row_stats(lane) && row_at[r] >= 0) {
      if (p.num_splits == 1) p.softmax_lse[row_at[r]] = lse;
      else p.lse_accum[int64_t(w.split) * p.batch * p.num_q_heads * p.seqlen_q + row_at[r]] = lse;
    }
  }
#pragma unroll
  for (int i = 0; i < OAcc::kSize; ++i) {
    const int r = OAcc::slot(i), col = OAcc::col(i, lane);
    if (row_at[r] < 0 || col >= p.head_dim) continue;
    const float x = o.x[i] * inv_sum[r];
    if (p.num_splits > 1) {
      const int64_t rows = int64_t(p.batch) * p.num_q_heads * p.seqlen_q;
      p.out_accum[(w.split * rows + row_at[r]) * p.head_dim + col] = x;
      continue;
    }
    const int32_t row = w.row0 + arch::slot_row(r, lane), token = row / p.heads_per_tile;
    const int32_t head = w.group * p.heads_per_tile + row % p.heads_per_tile;
    static_cast<T*>(p.out)[w.b * p.o_batch_stride + token * p.o_row_stride + head * p.o_head_stride + col] = T(x);
  }
}

template <DType kDType, int kHeadDim>
CFA_GLOBAL void __launch_bounds__((DecodeKernel<kDType, kHeadDim>::kThreads)) decode_kernel(const DecodeParams p) {
  using K = DecodeKernel<kDType, kHeadDim>;
  K::run(p, reinterpret_cast<typename K::T*>(dynamic_smem()));
}

// Merges the splits of every output element, one a thread: lse = log sum_s exp(lse_s),
// out = sum_s exp(lse_s - lse) out_s.
constexpr int kCombineThreads = 256;
template <typename T>
CFA_GLOBAL void __launch_bounds__(kCombineThreads) decode_combine_kernel(const DecodeParams p) {
  const int64_t rows = int64_t(p.batch) * p.num_q_heads * p.seqlen_q, elems = rows * p.head_dim;
  const int64_t e = int64_t(blockIdx.x) * kCombineThreads + threadIdx.x;
  if (e >= elems) return;
  const int64_t row = e / p.head_dim;
  const int col = int(e % p.head_dim);
  float top = -INFINITY;
  for (int s = 0; s < p.num_splits; ++s) top = fmaxf(top, p.lse_accum[s * rows + row]);
  float sum = 0.f, x = 0.f;
  if (top != -INFINITY) {
    for (int s = 0; s < p.num_splits; ++s) {
      const float weight = expf(p.lse_accum[s * rows + row] - top);
      sum += weight;
      x += weight * p.out_accum[(s * rows + row) * p.head_dim + col];
    }
  }
  const float lse = top == -INFINITY ? -INFINITY : top + logf(sum);
  if (col == 0) p.softmax_lse[row] = lse;
  const int32_t token = int32_t(row % p.seqlen_q), head = int32_t(row / p.seqlen_q % p.num_q_heads);
  const int32_t b = int32_t(row / p.seqlen_q / p.num_q_heads);
  static_cast<T*>(p.out)[b * p.o_batch_stride + token * p.o_row_stride + head * p.o_head_stride + col] =
      T(sum > 0.f ? x / sum : 0.f);
}

}  // namespace chiplet_fa::CFA_FAMILY
