// FlashAttention-2 backward, written once over the arch interface (arch/arch.h).
//
//   preprocess  one thread per query row, padded to whole query blocks: D = rowsum(dO * O) and
//               lse_log2 (BwdParams).
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
// The sm90 family runs kernels/sm90/bwd_kernel.h's warp-specialised main pass instead of `main`;
// the preprocess and the dQ pass serve every family.
#pragma once
#include <cmath>

#include "arch/arch.h"
#include "kernels/launch.h"
#include "kernels/bwd_params.h"
#include "mapping/mapping.h"
#include "kernels/tile_io.h"

namespace chiplet_fa::CFA_FAMILY {

template <DType kDType, int kHeadDim>
struct BwdConfig {
  using T = typename arch::Element<kDType>::type;
  static constexpr int kDim = kHeadDim;
  static constexpr int kBlockN = 64;
  static constexpr int kWarpRows = 16;  // one mma m-tile per warp
  static constexpr int kWarps = kBlockN / kWarpRows;
  static constexpr int kThreads = kWarps * arch::kWarpSize;
  // dK and dV accumulators live in registers for the whole workgroup: fewer query rows per
  // step for wide heads keeps S^T/dP^T small enough to fit beside them.
  static constexpr int kBlockM = kHeadDim <= 64 ? 64 : 32;
  static constexpr int kStride = arch::PaddedTile<1, kHeadDim>::kStride;
  static constexpr int kDsStride = arch::PaddedTile<1, kBlockM>::kStride;
  // dQ = dS K: warps split the kBlockM x D block into row groups of 16 and column slices.
  static constexpr int kDqRowGroups = kBlockM / kWarpRows;
  static constexpr int kDqCols = kHeadDim / (kWarps / kDqRowGroups);
  // Shared memory: K, V (kBlockN rows), Q, dO (kBlockM rows), dS^T, then lse and D as float.
  static constexpr int kSmemElems = (2 * kBlockN + 2 * kBlockM) * kStride + kBlockN * kDsStride;
  static constexpr int kSmemBytes = kSmemElems * int(sizeof(T)) + 2 * kBlockM * int(sizeof(float));
  static_assert(kHeadDim % 16 == 0 && kHeadDim <= 128, "GPU backward head dims: multiples of 16, at most 128");
  static_assert(kDqCols % 16 == 0, "dQ column slices must be whole mma tiles");
  static_assert(geometry(kFamily).bwd_row_pad % kBlockM == 0, "query blocks read lse_log2 and D unchecked");
};

template <DType kDType, int kHeadDim>
struct BwdDqConfig {
  using T = typename arch::Element<kDType>::type;
  static constexpr int kDim = kHeadDim;
  static constexpr int kBlockM = 64;
  static constexpr int kBlockN = arch::bwd_dq_block_n(kHeadDim);
  static constexpr int kWarpRows = 16;  // one mma m-tile per warp
  static constexpr int kWarps = kBlockM / kWarpRows;
  static constexpr int kThreads = kWarps * arch::kWarpSize;
  static constexpr int kStride = arch::PaddedTile<1, kHeadDim>::kStride;
  // Q and dO stay in shared memory (the mma A operands are read from there), then K and V.
  static constexpr int kSmemBytes = (2 * kBlockM + 2 * kBlockN) * kStride * int(sizeof(T));
  static_assert(geometry(kFamily).bwd_row_pad % kBlockM == 0, "query blocks read lse_log2 and D unchecked");
};

// One thread per padded query row, (batch, row, head) order so a warp reads neighbouring heads:
// D = rowsum(dO * O) and lse_log2 (see BwdParams), padding rows D = 0 and lse_log2 = +inf.
template <typename T>
CFA_GLOBAL void bwd_preprocess_kernel(const BwdParams p) {
  const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= int64_t(p.batch) * p.seqlen_q_rounded * p.num_q_heads) return;
  const int64_t h = r % p.num_q_heads, i = (r / p.num_q_heads) % p.seqlen_q_rounded;
  const int64_t b = r / (int64_t(p.num_q_heads) * p.seqlen_q_rounded);
  const int64_t at = (b * p.num_q_heads + h) * p.seqlen_q_rounded + i;
  float s = 0.f, lse_log2 = INFINITY;
  if (i < p.seqlen_q) {
    const T* o = static_cast<const T*>(p.out) + b * p.o_batch_stride + i * p.o_row_stride + h * p.o_head_stride;
    const T* d = static_cast<const T*>(p.dout) + b * p.do_batch_stride + i * p.do_row_stride + h * p.do_head_stride;
    for (int x = 0; x < p.head_dim; ++x) s += float(o[x]) * float(d[x]);
    const float l = p.softmax_lse[(b * p.num_q_heads + h) * p.seqlen_q + i];
    if (l != -INFINITY) lse_log2 = l * float(M_LOG2E);
  }
  static_cast<float*>(p.softmax_d)[at] = s;
  p.lse_log2[at] = lse_log2;
}

template <DType kDType, int kHeadDim, bool kCausal, bool kAtomicDq>
struct BwdKvKernel {
  using Cfg = BwdConfig<kDType, kHeadDim>;
  using T = typename Cfg::T;
  static constexpr int kBlockM = Cfg::kBlockM, kBlockN = Cfg::kBlockN, kStride = Cfg::kStride;
  static constexpr int kRows = Cfg::kWarpRows;
  using KeyAcc = arch::Acc<1, kHeadDim>;  // the warp's 16 keys x D (dK, dV)
  using ScoreAcc = arch::Acc<1, kBlockM>; // the warp's 16 keys x kBlockM queries (S^T, dP^T)

  static CFA_DEVICE void run(const BwdParams& p, T* smem) {
    const KvTile tile = map_kv_workgroup(p, blockIdx.x);
    const int warp = threadIdx.x / arch::kWarpSize, lane = threadIdx.x % arch::kWarpSize;
    const int n0 = tile.n_block * kBlockN;
    const int G = p.group_size();
    T* sK = smem;
    T* sV = sK + kBlockN * kStride;
    T* sQ = sV + kBlockN * kStride;
    T* sdO = sQ + kBlockM * kStride;
    T* sdS = sdO + kBlockM * kStride;  // dS^T, [key][query]
    float* sLse = reinterpret_cast<float*>(sdS + kBlockN * Cfg::kDsStride);
    float* sDelta = sLse + kBlockM;

    const T* k = static_cast<const T*>(p.k) + tile.batch * p.k_batch_stride + tile.kv_head * p.k_head_stride;
    const T* v = static_cast<const T*>(p.v) + tile.batch * p.v_batch_stride + tile.kv_head * p.v_head_stride;
    load_tile<arch::PaddedTile<kBlockN, kHeadDim>, Cfg::kThreads>(sK, k, p.k_row_stride, n0, p.seqlen_k, p.head_dim, threadIdx.x);
    load_tile<arch::PaddedTile<kBlockN, kHeadDim>, Cfg::kThreads>(sV, v, p.v_row_stride, n0, p.seqlen_k, p.head_dim, threadIdx.x);
    arch::copy_commit();
    arch::copy_wait<0>();  // made visible by the block_sync that opens every query block

    KeyAcc dk, dv;
#pragma unroll
    for (int i = 0; i < KeyAcc::kSize; ++i) dk.x[i] = dv.x[i] = 0.f;
    const float scale = float(p.softmax_scale), scale_log2 = scale * float(M_LOG2E);
    const int key0 = n0 + warp * kRows;  // the warp's first key
    // Query blocks before the first row that sees key n0 contribute nothing.
    const int m_block_begin = kCausal ? max(0, n0 - p.causal_offset()) / kBlockM : 0;
    const int m_blocks = (p.seqlen_q + kBlockM - 1) / kBlockM;

    for (int j = 0; j < G; ++j) {
      const int h = tile.kv_head * G + j;
      const T* q = static_cast<const T*>(p.q) + tile.batch * p.q_batch_stride + h * p.q_head_stride;
      const T* dout = static_cast<const T*>(p.dout) + tile.batch * p.do_batch_stride + h * p.do_head_stride;
      const int64_t row_base = (int64_t(tile.batch) * p.num_q_heads + h) * p.seqlen_q_rounded;
      const float* lse_log2 = p.lse_log2 + row_base;
      const float* delta = static_cast<const float*>(p.softmax_d) + row_base;
      for (int mb = m_block_begin; mb < m_blocks; ++mb) {
        const int m0 = mb * kBlockM;
        arch::block_sync();  // every warp is done with the previous block's Q, dO, dS^T
        load_tile<arch::PaddedTile<kBlockM, kHeadDim>, Cfg::kThreads>(sQ, q, p.q_row_stride, m0, p.seqlen_q, p.head_dim, threadIdx.x);
        load_tile<arch::PaddedTile<kBlockM, kHeadDim>, Cfg::kThreads>(sdO, dout, p.do_row_stride, m0, p.seqlen_q, p.head_dim, threadIdx.x);
        arch::copy_commit();
        for (int r = threadIdx.x; r < kBlockM; r += Cfg::kThreads) {
          sLse[r] = lse_log2[m0 + r];
          sDelta[r] = delta[m0 + r];
        }
        arch::copy_wait<0>();
        arch::block_sync();

        ScoreAcc s, dp;
        arch::warp_gemm_abt<T, 1, kBlockM, kHeadDim>(s, sK + warp * kRows * kStride, sQ, kStride, lane);
        arch::warp_gemm_abt<T, 1, kBlockM, kHeadDim>(dp, sV + warp * kRows * kStride, sdO, kStride, lane);
#pragma unroll
        for (int i = 0; i < ScoreAcc::kSize; ++i) {
          const int key = key0 + ScoreAcc::row(i, lane), qi = ScoreAcc::col(i, lane);
          const bool masked = key >= p.seqlen_k || (kCausal && key > m0 + qi + p.causal_offset());
          const float prob = masked ? 0.f : exp2f(s.x[i] * scale_log2 - sLse[qi]);
          s.x[i] = prob;                                // P^T
          dp.x[i] = prob * (dp.x[i] - sDelta[qi]);      // dS^T
        }
        {
          arch::PFrag<T, 1, kBlockM> pf;
          arch::pack_p(pf, s);
          arch::warp_gemm_pv<T, 1, kBlockM, kHeadDim>(dv, pf, sdO, kStride, lane);
          arch::pack_p(pf, dp);
          arch::warp_gemm_pv<T, 1, kBlockM, kHeadDim>(dk, pf, sQ, kStride, lane);
        }
        if constexpr (kAtomicDq) add_dq(p, tile, h, m0, dp, sK, sdS, warp, lane);
      }
    }

    T* dk_out = static_cast<T*>(p.dk) + tile.batch * p.dk_batch_stride + tile.kv_head * p.dk_head_stride;
    T* dv_out = static_cast<T*>(p.dv) + tile.batch * p.dv_batch_stride + tile.kv_head * p.dv_head_stride;
#pragma unroll
    for (int i = 0; i < KeyAcc::kSize; ++i) {
      const int key = key0 + KeyAcc::row(i, lane), col = KeyAcc::col(i, lane);
      if (key < p.seqlen_k && col < p.head_dim) {
        dk_out[key * p.dk_row_stride + col] = T(dk.x[i] * scale);
        dv_out[key * p.dv_row_stride + col] = T(dv.x[i]);
      }
    }
  }

  // dQ[m0 .. m0 + kBlockM) += dS K * scale: dS^T goes through shared memory so each warp can
  // read its query rows as an mma A operand; then one atomic add per element.
  static CFA_DEVICE void add_dq(const BwdParams& p, const KvTile& tile, int h, int m0,
                                const ScoreAcc& ds_t, const T* sK, T* sdS, int warp, int lane) {
    using DsAcc = arch::Acc<1, kBlockN>;       // 16 queries x the block's keys
    using DqAcc = arch::Acc<1, Cfg::kDqCols>;  // 16 queries x the warp's column slice
#pragma unroll
    for (int i = 0; i < ScoreAcc::kSize; ++i)
      sdS[(warp * kRows + ScoreAcc::row(i, lane)) * Cfg::kDsStride + ScoreAcc::col(i, lane)] = T(ds_t.x[i]);
    arch::block_sync();
    const int row_group = warp % Cfg::kDqRowGroups, col0 = (warp / Cfg::kDqRowGroups) * Cfg::kDqCols;
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
      if (row < p.seqlen_q && col < p.head_dim)
        atomicAdd(dq_accum + ((int64_t(tile.batch) * p.seqlen_q + row) * p.num_q_heads + h) * p.head_dim + col,
                  dq.x[i] * scale);
    }
  }
};

template <DType kDType, int kHeadDim, bool kCausal>
struct BwdDqKernel {
  using Cfg = BwdDqConfig<kDType, kHeadDim>;
  using T = typename Cfg::T;
  static constexpr int kBlockM = Cfg::kBlockM, kBlockN = Cfg::kBlockN, kStride = Cfg::kStride;
  using DqAcc = arch::Acc<1, kHeadDim>;  // the warp's 16 query rows x D
  using ScoreAcc = arch::Acc<1, kBlockN>;
  static constexpr int kSlots = DqAcc::kSlots;

  static CFA_DEVICE void run(const BwdParams& p, T* smem) {
    const Tile tile = map_workgroup(p.mapping, blockIdx.x, p.grid_shape());
    const int warp = threadIdx.x / arch::kWarpSize, lane = threadIdx.x % arch::kWarpSize;
    const int m0 = tile.m_block * kBlockM;
    const int kv_head = tile.q_head / p.group_size();
    const T* q = static_cast<const T*>(p.q) + tile.batch * p.q_batch_stride + tile.q_head * p.q_head_stride;
    const T* dout = static_cast<const T*>(p.dout) + tile.batch * p.do_batch_stride + tile.q_head * p.do_head_stride;
    const T* k = static_cast<const T*>(p.k) + tile.batch * p.k_batch_stride + kv_head * p.k_head_stride;
    const T* v = static_cast<const T*>(p.v) + tile.batch * p.v_batch_stride + kv_head * p.v_head_stride;
    const int64_t row_base = (int64_t(tile.batch) * p.num_q_heads + tile.q_head) * p.seqlen_q_rounded;
    const int warp_row0 = m0 + warp * Cfg::kWarpRows;

    T* sQ = smem;
    T* sdO = sQ + kBlockM * kStride;
    T* sK = sdO + kBlockM * kStride;
    T* sV = sK + kBlockN * kStride;
    load_tile<arch::PaddedTile<kBlockM, kHeadDim>, Cfg::kThreads>(sQ, q, p.q_row_stride, m0, p.seqlen_q, p.head_dim, threadIdx.x);
    load_tile<arch::PaddedTile<kBlockM, kHeadDim>, Cfg::kThreads>(sdO, dout, p.do_row_stride, m0, p.seqlen_q, p.head_dim, threadIdx.x);
    arch::copy_commit();
    float lse_log2[kSlots], delta[kSlots];
#pragma unroll
    for (int r = 0; r < kSlots; ++r) {
      const int row = warp_row0 + arch::slot_row(r, lane);
      lse_log2[r] = p.lse_log2[row_base + row];
      delta[r] = static_cast<const float*>(p.softmax_d)[row_base + row];
    }
    const T* sQ_warp = sQ + warp * Cfg::kWarpRows * kStride;
    const T* sdO_warp = sdO + warp * Cfg::kWarpRows * kStride;

    DqAcc dq;
#pragma unroll
    for (int i = 0; i < DqAcc::kSize; ++i) dq.x[i] = 0.f;
    const float scale = float(p.softmax_scale), scale_log2 = scale * float(M_LOG2E);
    int n_end = p.seqlen_k;  // keys past the last row's causal limit are never loaded
    if (kCausal) n_end = min(n_end, m0 + kBlockM + p.causal_offset());
    for (int n0 = 0; n0 < n_end; n0 += kBlockN) {
      arch::block_sync();  // every warp is done with the previous K/V
      load_tile<arch::PaddedTile<kBlockN, kHeadDim>, Cfg::kThreads>(sK, k, p.k_row_stride, n0, p.seqlen_k, p.head_dim, threadIdx.x);
      load_tile<arch::PaddedTile<kBlockN, kHeadDim>, Cfg::kThreads>(sV, v, p.v_row_stride, n0, p.seqlen_k, p.head_dim, threadIdx.x);
      arch::copy_commit();
      arch::copy_wait<0>();  // K, V (and Q, dO on the first block)
      arch::block_sync();
      ScoreAcc s, dp;
      arch::warp_gemm_abt<T, 1, kBlockN, kHeadDim>(s, sQ_warp, sK, kStride, lane);
      arch::warp_gemm_abt<T, 1, kBlockN, kHeadDim>(dp, sdO_warp, sV, kStride, lane);
#pragma unroll
      for (int i = 0; i < ScoreAcc::kSize; ++i) {
        const int row = warp_row0 + ScoreAcc::row(i, lane), col = n0 + ScoreAcc::col(i, lane);
        const bool masked = col >= p.seqlen_k || (kCausal && col > row + p.causal_offset());
        const int r = ScoreAcc::slot(i);
        const float prob = masked ? 0.f : exp2f(s.x[i] * scale_log2 - lse_log2[r]);
        s.x[i] = prob * (dp.x[i] - delta[r]);  // dS
      }
      arch::PFrag<T, 1, kBlockN> dsf;
      arch::pack_p(dsf, s);
      arch::warp_gemm_pv<T, 1, kBlockN, kHeadDim>(dq, dsf, sK, kStride, lane);
    }
    arch::copy_wait<0>();  // Q and dO of a tile that sees no key were never waited for

    float* dq_accum = static_cast<float*>(p.dq_accum);
#pragma unroll
    for (int i = 0; i < DqAcc::kSize; ++i) {
      const int row = warp_row0 + DqAcc::row(i, lane), col = DqAcc::col(i, lane);
      if (row < p.seqlen_q && col < p.head_dim)
        dq_accum[((int64_t(tile.batch) * p.seqlen_q + row) * p.num_q_heads + tile.q_head) * p.head_dim + col] =
            dq.x[i] * scale;
    }
  }
};

// The bounds are parenthesised for HIP's variadic __launch_bounds__ (see fwd_kernel.h).
template <DType kDType, int kHeadDim, bool kCausal, bool kAtomicDq>
CFA_GLOBAL void __launch_bounds__((BwdConfig<kDType, kHeadDim>::kThreads))
    bwd_kv_kernel(const BwdParams p) {
  using K = BwdKvKernel<kDType, kHeadDim, kCausal, kAtomicDq>;
  K::run(p, reinterpret_cast<typename K::T*>(dynamic_smem()));
}

template <DType kDType, int kHeadDim, bool kCausal>
CFA_GLOBAL void __launch_bounds__((BwdDqConfig<kDType, kHeadDim>::kThreads))
    bwd_dq_kernel(const BwdParams p) {
  using K = BwdDqKernel<kDType, kHeadDim, kCausal>;
  K::run(p, reinterpret_cast<typename K::T*>(dynamic_smem()));
}

}  // namespace chiplet_fa::CFA_FAMILY
