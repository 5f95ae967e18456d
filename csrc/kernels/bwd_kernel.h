// FlashAttention-2 backward, written once over the arch interface (arch/arch.h).
//
//   preprocess  a group of lanes per query row, padded to whole query blocks: D = rowsum(dO * O)
//               and lse_log2 (BwdParams).
//   main        KV-block parallel (map_kv_workgroup): a workgroup owns kBlockN keys of one KV
//               head, one warp per 16 keys. For each query head of the group and each block of
//               kBlockM queries it computes, transposed so the warp's keys are the mma rows,
//                 S^T = K Q^T, dP^T = V dO^T, P^T = exp(S^T * scale - lse), dS^T = P^T (dP^T - D),
//                 dV += P^T dO, dK += dS^T Q,
//               and with kAtomicDq stages dS^T in shared memory and adds dQ += dS K * scale to
//               the fp32 accumulator with atomics.
//   dq          deterministic mode: query-block parallel (the forward's grid and mapping), one
//               warp per 16 query rows: S = Q K^T, dP = dO V^T, dS, dQ += dS K over the keys in
//               order, one plain store per element.
// Head dims above 128 run in column slices (bwd_slices): one launch of main (and dq) per slice of
// dK, dV and dQ columns, each recomputing the scores over the whole head dim.
// The sm90 family runs kernels/sm90/bwd_kernel_sm90.h's warp-specialised main pass instead of `main`;
// the preprocess and the dQ pass serve every family.
#pragma once
#include <cmath>

#include "arch/arch.h"
#include "kernels/launch.h"
#include "kernels/bwd_params.h"
#include "kernels/scores.h"
#include "mapping/mapping.h"
#include "kernels/tile_io.h"
#include "kernels/tile_sizes.h"

namespace chiplet_fa::CFA_FAMILY {

// dK and dV (main) and dQ (dq) of a warp's 16 rows x D live in registers, which hold 16 x 128 of
// each; wider heads split those columns into slices of at most 128, one launch each (BwdParams::
// slice_col0), and every slice recomputes S and dP over the whole head dim: at D=256 the passes do
// 1.4x the products of an unsplit one, and need no more registers than D=128.
constexpr int bwd_slices(int head_dim) { return (head_dim + 127) / 128; }
constexpr int bwd_slice_dim(int head_dim) { return head_dim / bwd_slices(head_dim); }
// A launch's first column: a constant 0 when the head dim is not split.
template <int kHeadDim>
CFA_DEVICE int slice_start(const BwdParams& p) { return bwd_slices(kHeadDim) > 1 ? p.slice_col0 : 0; }

template <DType kDType, int kHeadDim>
struct BwdConfig {
  using T = typename arch::Element<kDType>::type;
  static constexpr int kDim = kHeadDim;
  static constexpr BwdTiling kTiling = bwd_tiling(kFamily, kHeadDim);
  static constexpr int kBlockN = kTiling.block_n;
  static constexpr int kWarpRows = 16;  // one mma m-tile per warp
  static constexpr int kWarps = kBlockN / kWarpRows;
  static constexpr int kThreads = kWarps * arch::kWarpSize;
  static constexpr int kSliceDim = bwd_slice_dim(kHeadDim);  // dK, dV columns a launch owns
  static constexpr int kBlockM = kTiling.block_m;
  static constexpr int kStride = arch::PaddedTile<1, kHeadDim>::kStride;
  static constexpr int kDsStride = arch::PaddedTile<1, kBlockM>::kStride;
  // dQ = dS K: warps split the kBlockM x kSliceDim block into row groups of 16 and column pieces.
  static constexpr int kDqRowGroups = kBlockM / kWarpRows;
  static constexpr int kDqCols = kSliceDim / (kWarps / kDqRowGroups);
  // Shared memory: K, V (kBlockN rows), Q, dO (kBlockM rows), dS^T, then lse and D as float.
  static constexpr int kSmemElems = (2 * kBlockN + 2 * kBlockM) * kStride + kBlockN * kDsStride;
  static constexpr int kSmemBytes = kSmemElems * int(sizeof(T)) + 2 * kBlockM * int(sizeof(float));
  static_assert(kHeadDim % 16 == 0 && kSliceDim % 16 == 0, "GPU backward head dims: whole slices of mma tiles");
  static_assert(kWarps % kDqRowGroups == 0 && kDqCols % 16 == 0, "dQ column pieces must be whole mma tiles");
  static_assert(geometry(kFamily).bwd_row_pad % kBlockM == 0, "query blocks read lse_log2 and D unchecked");
};

template <DType kDType, int kHeadDim>
struct BwdDqConfig {
  using T = typename arch::Element<kDType>::type;
  static constexpr int kDim = kHeadDim;
  static constexpr DqTiling kTiling = dq_tiling(kFamily, kHeadDim);
  static constexpr int kBlockM = kTiling.block_m;
  static constexpr int kBlockN = kTiling.block_n;
  static constexpr int kSliceDim = bwd_slice_dim(kHeadDim);  // dQ columns a launch owns
  static constexpr int kWarpRows = 16;  // one mma m-tile per warp
  static constexpr int kWarps = kBlockM / kWarpRows;
  static constexpr int kThreads = kWarps * arch::kWarpSize;
  static constexpr int kStride = arch::PaddedTile<1, kHeadDim>::kStride;
  // Q and dO stay in shared memory (the mma A operands are read from there), then K and V.
  static constexpr int kSmemBytes = (2 * kBlockM + 2 * kBlockN) * kStride * int(sizeof(T));
  static_assert(geometry(kFamily).bwd_row_pad % kBlockM == 0, "query blocks read lse_log2 and D unchecked");
};

// BwdParams::kRowLanes lanes per (row, head) of softmax_d's layout (BwdParams), heads fastest,
// each reading 16-byte pieces of O and dO: a warp reads whole sectors of neighbouring heads (one
// thread a row, reading 2 bytes at a time, had run at a quarter of the DRAM rate). D =
// rowsum(dO * O) and lse_log2 (see BwdParams), padding rows D = 0 and lse_log2 = +inf; with
// fixed-point dQ also the row's dq_scale. In a dense batch the lanes also clear the row's dq_accum
// (4-byte float or int32 units), which saves the binding a fill over it (a packed batch's rows past
// its last sequence are no lane's: the binding clears that one). Rows between a packed sequence's
// padded rows and the next sequence's are no lane's either: no kernel reads them. No lane leaves
// before the group's sums.
constexpr int kPreprocessLanes = BwdParams::kRowLanes;

// The packed sequence whose rows of softmax_d's layout hold `row`: the last b whose first row
// (BwdParams::packed_stats_start, non-decreasing in b) is at most `row`.
CFA_HOST_DEVICE int32_t packed_sequence_of_row(const BwdParams& p, int64_t row) {
  int32_t lo = 0, hi = p.batch;
  while (hi - lo > 1) {
    const int32_t mid = lo + (hi - lo) / 2;
    if (p.packed_stats_start(mid) <= row) lo = mid;
    else hi = mid;
  }
  return lo;
}

template <typename T>
struct PreprocessLane {
  static constexpr int kPiece = 16 / int(sizeof(T));  // the binding pads the head dim to a multiple of 8
  int b, h, i, part;
  Sequence s;
  bool in_grid;
  CFA_DEVICE explicit PreprocessLane(const BwdParams& p) {
    const int64_t r = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kPreprocessLanes;
    const int64_t row = r / p.num_q_heads, rows = p.head_stats_rows();
    part = int(threadIdx.x % kPreprocessLanes);
    h = int(r % p.num_q_heads);
    int64_t first = 0;  // the sequence's first row in the layout
    if (!p.cu_seqlens_q) {
      b = int(row / p.stats_rows);
      first = int64_t(b) * p.stats_rows;
    } else {
      b = row < rows ? packed_sequence_of_row(p, row) : 0;
      first = p.packed_stats_start(b);
    }
    s = p.sequence(b);
    const int64_t padded = (s.len_q + p.stats_pad - 1) / p.stats_pad * p.stats_pad;
    in_grid = row < rows && row - first < padded;
    i = in_grid ? int(row - first) : 0;
  }
  CFA_DEVICE bool has_row() const { return in_grid && i < s.len_q; }
};

// Fixed-point dQ's unit for one row: |dQ| <= scale * max|K| * sum_j |dS_j| (a softcap's derivative
// is at most 1) and sum_j |dS_j| = sum_j P_j |dP_j - D| <= |dO|_1 max|V| + |D| (P sums to at most
// 1), so with 2^30 units per bound the sums stay below 2^31 with room for rounding. Not finite:
// NaN, which the conversion turns into a NaN row as an fp32 sum would be.
CFA_DEVICE float dq_fixed_scale(const BwdParams& p, float do_l1, float delta) {
  const float bound = float(p.softmax_scale) * p.kv_absmax[0] * (do_l1 * p.kv_absmax[1] + fabsf(delta));
  if (!(bound < INFINITY)) return NAN;
  return exp2f(fminf(126.f, fmaxf(-126.f, 30.f - ceilf(log2f(bound)))));  // bound 0: 2^126, shares are 0
}

template <typename T>
CFA_GLOBAL void bwd_preprocess_kernel(const BwdParams p) {
  using Lane = PreprocessLane<T>;
  struct alignas(16) Piece {
    T e[Lane::kPiece];
  };
  const Lane at(p);
  float sum = 0.f, l1 = 0.f, lse_log2 = INFINITY;
  if (at.has_row()) {
    const int64_t row = at.s.q_start + at.i;
    const T* o = static_cast<const T*>(p.out) + at.b * p.o_batch_stride + row * p.o_row_stride + at.h * p.o_head_stride;
    const T* d = static_cast<const T*>(p.dout) + at.b * p.do_batch_stride + row * p.do_row_stride + at.h * p.do_head_stride;
    float4* acc = p.cu_seqlens_q ? nullptr
                                 : reinterpret_cast<float4*>(static_cast<float*>(p.dq_accum) + p.dq_offset(at.b, at.s, at.i, at.h));
    for (int c = at.part * Lane::kPiece; c < p.head_dim; c += kPreprocessLanes * Lane::kPiece) {
      const Piece x = *reinterpret_cast<const Piece*>(o + c), y = *reinterpret_cast<const Piece*>(d + c);
      if (acc)
#pragma unroll
        for (int e = 0; e < Lane::kPiece / 4; ++e) acc[c / 4 + e] = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
      for (int e = 0; e < Lane::kPiece; ++e) {
        sum += float(x.e[e]) * float(y.e[e]);
        l1 += fabsf(float(y.e[e]));
      }
    }
    const float* lse = static_cast<const float*>(p.softmax_lse);
    const float l = lse[at.b * p.lse_batch_stride + at.h * p.lse_head_stride + row];
    if (l != -INFINITY) lse_log2 = l * float(M_LOG2E);
  }
  sum = arch::lane_group_sum<kPreprocessLanes>(sum);
  if (p.dq_scale) l1 = arch::lane_group_sum<kPreprocessLanes>(l1);
  if (at.in_grid && at.part == 0) {
    const int64_t stats = p.stats_row(at.b, at.h, at.s) + at.i;
    static_cast<float*>(p.softmax_d)[stats] = sum;
    p.lse_log2[stats] = lse_log2;
    if (p.dq_scale) p.dq_scale[stats] = at.has_row() ? dq_fixed_scale(p, l1, sum) : 1.f;
  }
}

// Fixed-point dQ to the input type: dq_out = dq_accum / dq_scale, lanes as the preprocess's.
template <typename T>
CFA_GLOBAL void bwd_dq_fixed_kernel(const BwdParams p) {
  using Lane = PreprocessLane<T>;
  const Lane at(p);
  if (!at.has_row()) return;
  const float unit = 1.f / p.dq_scale[p.stats_row(at.b, at.h, at.s) + at.i];  // a power of two: exact
  const int64_t offset = p.dq_offset(at.b, at.s, at.i, at.h);
  const int32_t* acc = static_cast<const int32_t*>(p.dq_accum) + offset;
  T* out = static_cast<T*>(p.dq_out) + offset;
  struct alignas(16) Sums {
    int32_t e[Lane::kPiece];
  };
  struct alignas(16) Pairs {
    uint32_t e[Lane::kPiece / 2];
  };
  for (int c = at.part * Lane::kPiece; c < p.head_dim; c += kPreprocessLanes * Lane::kPiece) {
    const Sums x = *reinterpret_cast<const Sums*>(acc + c);
    Pairs y;
#pragma unroll
    for (int e = 0; e < Lane::kPiece / 2; ++e) y.e[e] = arch::pack2<T>(float(x.e[2 * e]) * unit, float(x.e[2 * e + 1]) * unit);
    *reinterpret_cast<Pairs*>(out + c) = y;
  }
}

// P and dS of one score s of (query row, key col): P = 2^(logit - lse_log2), 0 where masked;
// dS = P (dP - D) times the softcap's derivative.
struct ProbGrad {
  float prob, ds;
};
CFA_DEVICE ProbGrad prob_grad(const ScoreMod& mod, float s, float dp, int row, int col, bool masked, float lse_log2,
                              float delta) {
  float grad;
  const float logit = mod.logit(s, row, col, &grad);  // grad is set for masked scores too: 0 * grad
  const float prob = masked ? 0.f : arch::fast_exp2(logit - lse_log2);
  return {prob, prob * (dp - delta) * grad};
}

template <DType kDType, int kHeadDim, bool kWindowed, bool kAtomicDq>
struct BwdKvKernel {
  using Cfg = BwdConfig<kDType, kHeadDim>;
  using T = typename Cfg::T;
  static constexpr int kBlockM = Cfg::kBlockM, kBlockN = Cfg::kBlockN, kStride = Cfg::kStride;
  static constexpr int kRows = Cfg::kWarpRows;
  static constexpr int kSliceDim = Cfg::kSliceDim;
  using KeyAcc = arch::Acc<1, kSliceDim>;  // the warp's 16 keys x the slice's columns (dK, dV)
  using ScoreAcc = arch::Acc<1, kBlockM>; // the warp's 16 keys x kBlockM queries (S^T, dP^T)

  static CFA_DEVICE void run(const BwdParams& p, T* smem) {
    if (blockIdx.x >= grid_size(p.kv_grid_shape())) return;  // a ragged grid is launched with a bound
    const KvTile tile = map_kv_workgroup(p, blockIdx.x);
    const int warp = threadIdx.x / arch::kWarpSize, lane = threadIdx.x % arch::kWarpSize;
    const int n0 = tile.n_block * kBlockN;
    const int col0 = slice_start<kHeadDim>(p);
    const int G = p.group_size();
    const Sequence seq = p.sequence(tile.batch);
    const KeyWindow window = p.key_window(seq);
    const auto slabs = p.kv_slabs<T>(tile.batch, tile.kv_head, seq);
    T* sK = smem;
    T* sV = sK + kBlockN * kStride;
    T* sQ = sV + kBlockN * kStride;
    T* sdO = sQ + kBlockM * kStride;
    T* sdS = sdO + kBlockM * kStride;  // dS^T, [key][query]
    float* sLse = reinterpret_cast<float*>(sdS + kBlockN * Cfg::kDsStride);
    float* sDelta = sLse + kBlockM;

    load_tile<arch::PaddedTile<kBlockN, kHeadDim>, Cfg::kThreads>(sK, slabs.k, p.k_row_stride, n0, seq.len_k, p.head_dim, threadIdx.x);
    load_tile<arch::PaddedTile<kBlockN, kHeadDim>, Cfg::kThreads>(sV, slabs.v, p.v_row_stride, n0, seq.len_k, p.head_dim, threadIdx.x);
    arch::copy_commit();
    arch::copy_wait<0>();  // made visible by the block_sync that opens every query block

    KeyAcc dk, dv;
#pragma unroll
    for (int i = 0; i < KeyAcc::kSize; ++i) dk.x[i] = dv.x[i] = 0.f;
    const int key0 = n0 + warp * kRows;  // the warp's first key
    // Only query blocks with a row whose window reaches into these keys contribute.
    const BlockRange rows = query_blocks(window, n0, n0 + kBlockN, kBlockM);

    for (int j = 0; j < G; ++j) {
      const int h = tile.kv_head * G + j;
      const auto qs = p.query_slabs<T>(tile.batch, h, seq);
      const ScoreMod mod(p, tile.batch, h, seq);
      for (int mb = rows.first; mb < rows.end; ++mb) {
        const int m0 = mb * kBlockM;
        arch::block_sync();  // every warp is done with the previous block's Q, dO, dS^T
        load_tile<arch::PaddedTile<kBlockM, kHeadDim>, Cfg::kThreads>(sQ, qs.q, p.q_row_stride, m0, seq.len_q, p.head_dim, threadIdx.x);
        load_tile<arch::PaddedTile<kBlockM, kHeadDim>, Cfg::kThreads>(sdO, qs.dout, p.do_row_stride, m0, seq.len_q, p.head_dim, threadIdx.x);
        arch::copy_commit();
        for (int r = threadIdx.x; r < kBlockM; r += Cfg::kThreads) {
          sLse[r] = qs.lse_log2[m0 + r];
          sDelta[r] = qs.delta[m0 + r];
        }
        arch::copy_wait<0>();
        arch::block_sync();

        ScoreAcc s, dp;
        arch::warp_gemm_abt<T, 1, kBlockM, kHeadDim>(s, sK + warp * kRows * kStride, sQ, kStride, lane);
        arch::warp_gemm_abt<T, 1, kBlockM, kHeadDim>(dp, sV + warp * kRows * kStride, sdO, kStride, lane);
#pragma unroll
        for (int i = 0; i < ScoreAcc::kSize; ++i) {
          const int key = key0 + ScoreAcc::row(i, lane), qi = ScoreAcc::col(i, lane), row = m0 + qi;
          const bool masked = kWindowed ? !window.visible(row, key) : key >= seq.len_k;
          const ProbGrad pg = prob_grad(mod, s.x[i], dp.x[i], row, key, masked, sLse[qi], sDelta[qi]);
          s.x[i] = pg.prob;  // P^T
          dp.x[i] = pg.ds;   // dS^T
        }
        {
          arch::PFrag<T, 1, kBlockM> pf;
          arch::pack_p(pf, s);
          arch::warp_gemm_pv<T, 1, kBlockM, kSliceDim>(dv, pf, sdO + col0, kStride, lane);
          arch::pack_p(pf, dp);
          arch::warp_gemm_pv<T, 1, kBlockM, kSliceDim>(dk, pf, sQ + col0, kStride, lane);
        }
        if constexpr (kAtomicDq) add_dq(p, tile.batch, seq, h, m0, col0, dp, sK, sdS, warp, lane);
      }
    }

    const float scale = float(p.softmax_scale);
#pragma unroll
    for (int i = 0; i < KeyAcc::kSize; ++i) {
      const int key = key0 + KeyAcc::row(i, lane), col = col0 + KeyAcc::col(i, lane);
      if (key < seq.len_k && col < p.head_dim) {
        slabs.dk[key * p.dk_row_stride + col] = T(dk.x[i] * scale);
        slabs.dv[key * p.dv_row_stride + col] = T(dv.x[i]);
      }
    }
  }

  // dQ[m0 .. m0 + kBlockM) += dS K * scale in the slice's columns from slice0: dS^T goes through
  // shared memory so each warp can read its query rows as an mma A operand; then one atomic add
  // per element.
  static CFA_DEVICE void add_dq(const BwdParams& p, int b, const Sequence& seq, int h, int m0, int slice0,
                                const ScoreAcc& ds_t, const T* sK, T* sdS, int warp, int lane) {
    using DsAcc = arch::Acc<1, kBlockN>;       // 16 queries x the block's keys
    using DqAcc = arch::Acc<1, Cfg::kDqCols>;  // 16 queries x the warp's column slice
#pragma unroll
    for (int i = 0; i < ScoreAcc::kSize; ++i)
      sdS[(warp * kRows + ScoreAcc::row(i, lane)) * Cfg::kDsStride + ScoreAcc::col(i, lane)] = T(ds_t.x[i]);
    arch::block_sync();
    const int row_group = warp % Cfg::kDqRowGroups, col0 = slice0 + (warp / Cfg::kDqRowGroups) * Cfg::kDqCols;
    DsAcc ds;
#pragma unroll
    for (int i = 0; i < DsAcc::kSize; ++i)
      ds.x[i] = float(sdS[DsAcc::col(i, lane) * Cfg::kDsStride + row_group * kRows + DsAcc::row(i, lane)]);
    arch::PFrag<T, 1, kBlockN> dsf;
    arch::pack_p(dsf, ds);
    DqAcc dq;
#pragma unroll
    for (int i = 0; i < DqAcc::kSize; ++i) dq.x[i] = 0.f;
    arch::warp_gemm_pv<T, 1, kBlockN, Cfg::kDqCols>(dq, dsf, sK + col0, kStride, lane);
    const float scale = float(p.softmax_scale);
    float* dq_accum = static_cast<float*>(p.dq_accum);
#pragma unroll
    for (int i = 0; i < DqAcc::kSize; ++i) {
      const int row = m0 + row_group * kRows + DqAcc::row(i, lane);
      const int col = col0 + DqAcc::col(i, lane);
      if (row < seq.len_q && col < p.head_dim) atomicAdd(dq_accum + p.dq_offset(b, seq, row, h) + col, dq.x[i] * scale);
    }
  }
};

template <DType kDType, int kHeadDim, bool kWindowed>
struct BwdDqKernel {
  using Cfg = BwdDqConfig<kDType, kHeadDim>;
  using T = typename Cfg::T;
  static constexpr int kBlockM = Cfg::kBlockM, kBlockN = Cfg::kBlockN, kStride = Cfg::kStride;
  static constexpr int kSliceDim = Cfg::kSliceDim;
  using DqAcc = arch::Acc<1, kSliceDim>;  // the warp's 16 query rows x the slice's columns
  using ScoreAcc = arch::Acc<1, kBlockN>;
  static constexpr int kSlots = DqAcc::kSlots;

  static CFA_DEVICE void run(const BwdParams& p, T* smem) {
    const GridShape grid = p.grid_shape();
    if (blockIdx.x >= grid_size(grid)) return;  // a ragged grid is launched with a bound
    const Tile tile = map_workgroup(p.mapping, blockIdx.x, grid);
    const int warp = threadIdx.x / arch::kWarpSize, lane = threadIdx.x % arch::kWarpSize;
    const int m0 = tile.m_block * kBlockM;
    const int col0 = slice_start<kHeadDim>(p);
    const Sequence seq = p.sequence(tile.batch);
    const KeyWindow window = p.key_window(seq);
    const ScoreMod mod(p, tile.batch, tile.q_head, seq);
    const auto qs = p.query_slabs<T>(tile.batch, tile.q_head, seq);
    const auto kvs = p.kv_slabs<T>(tile.batch, tile.q_head / p.group_size(), seq);
    const int warp_row0 = m0 + warp * Cfg::kWarpRows;

    T* sQ = smem;
    T* sdO = sQ + kBlockM * kStride;
    T* sK = sdO + kBlockM * kStride;
    T* sV = sK + kBlockN * kStride;
    load_tile<arch::PaddedTile<kBlockM, kHeadDim>, Cfg::kThreads>(sQ, qs.q, p.q_row_stride, m0, seq.len_q, p.head_dim, threadIdx.x);
    load_tile<arch::PaddedTile<kBlockM, kHeadDim>, Cfg::kThreads>(sdO, qs.dout, p.do_row_stride, m0, seq.len_q, p.head_dim, threadIdx.x);
    arch::copy_commit();
    float lse_log2[kSlots], delta[kSlots];
#pragma unroll
    for (int r = 0; r < kSlots; ++r) {
      const int row = warp_row0 + arch::slot_row(r, lane);
      lse_log2[r] = qs.lse_log2[row];
      delta[r] = qs.delta[row];
    }
    const T* sQ_warp = sQ + warp * Cfg::kWarpRows * kStride;
    const T* sdO_warp = sdO + warp * Cfg::kWarpRows * kStride;

    DqAcc dq;
#pragma unroll
    for (int i = 0; i < DqAcc::kSize; ++i) dq.x[i] = 0.f;
    // Keys outside every row's window are never loaded.
    const BlockRange keys = key_blocks(window, m0, min(m0 + kBlockM, seq.len_q) - 1, kBlockN);
    for (int n0 = keys.first * kBlockN; n0 < keys.end * kBlockN; n0 += kBlockN) {
      arch::block_sync();  // every warp is done with the previous K/V
      load_tile<arch::PaddedTile<kBlockN, kHeadDim>, Cfg::kThreads>(sK, kvs.k, p.k_row_stride, n0, seq.len_k, p.head_dim, threadIdx.x);
      load_tile<arch::PaddedTile<kBlockN, kHeadDim>, Cfg::kThreads>(sV, kvs.v, p.v_row_stride, n0, seq.len_k, p.head_dim, threadIdx.x);
      arch::copy_commit();
      arch::copy_wait<0>();  // K, V (and Q, dO on the first block)
      arch::block_sync();
      ScoreAcc s, dp;
      arch::warp_gemm_abt<T, 1, kBlockN, kHeadDim>(s, sQ_warp, sK, kStride, lane);
      arch::warp_gemm_abt<T, 1, kBlockN, kHeadDim>(dp, sdO_warp, sV, kStride, lane);
#pragma unroll
      for (int i = 0; i < ScoreAcc::kSize; ++i) {
        const int row = warp_row0 + ScoreAcc::row(i, lane), col = n0 + ScoreAcc::col(i, lane);
        const bool masked = kWindowed ? !window.visible(row, col) : col >= seq.len_k;
        const int r = ScoreAcc::slot(i);
        s.x[i] = prob_grad(mod, s.x[i], dp.x[i], row, col, masked, lse_log2[r], delta[r]).ds;  // dS
      }
      arch::PFrag<T, 1, kBlockN> dsf;
      arch::pack_p(dsf, s);
      arch::warp_gemm_pv<T, 1, kBlockN, kSliceDim>(dq, dsf, sK + col0, kStride, lane);
    }
    arch::copy_wait<0>();  // Q and dO of a tile that sees no key were never waited for

    float* dq_accum = static_cast<float*>(p.dq_accum);
    const float scale = float(p.softmax_scale);
#pragma unroll
    for (int i = 0; i < DqAcc::kSize; ++i) {
      const int row = warp_row0 + DqAcc::row(i, lane), col = col0 + DqAcc::col(i, lane);
      if (row < seq.len_q && col < p.head_dim) dq_accum[p.dq_offset(tile.batch, seq, row, tile.q_head) + col] = dq.x[i] * scale;
    }
  }
};

// The bounds are parenthesised for HIP's variadic __launch_bounds__ (see fwd_kernel.h).
template <DType kDType, int kHeadDim, bool kWindowed, bool kAtomicDq>
CFA_GLOBAL void __launch_bounds__((BwdConfig<kDType, kHeadDim>::kThreads))
    bwd_kv_kernel(const BwdParams p) {
  using K = BwdKvKernel<kDType, kHeadDim, kWindowed, kAtomicDq>;
  K::run(p, reinterpret_cast<typename K::T*>(dynamic_smem()));
}

template <DType kDType, int kHeadDim, bool kWindowed>
CFA_GLOBAL void __launch_bounds__((BwdDqConfig<kDType, kHeadDim>::kThreads))
    bwd_dq_kernel(const BwdParams p) {
  using K = BwdDqKernel<kDType, kHeadDim, kWindowed>;
  K::run(p, reinterpret_cast<typename K::T*>(dynamic_smem()));
}

}  // namespace chiplet_fa::CFA_FAMILY
