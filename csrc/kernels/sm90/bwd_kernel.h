// FlashAttention-2 backward main pass for sm_90a, warp-specialised like kernels/sm90/fwd_kernel.h.
// A workgroup owns kBlockN = 128 keys of one KV head (map_kv_workgroup, ACC = KV head) and
// produces their dK and dV; with kAtomicDq it also adds every query block's dQ share.
//   producer   (warpgroup 0) copies K and V once, then Q, dO, lse_log2 and D of each query
//              block (every query head of the group in turn) into a ring of kStages buffers
//              with cp.async, guarded by mbarriers (full: landed, empty: released).
//   consumers  (warpgroups 1, 2) own 64 keys each and keep dK, dV (64 x D) in registers. Per
//              query block of 64 rows, transposed so the keys are the wgmma rows:
//                S^T = K Q^T, dP^T = V dO^T        (wgmma, both operands in shared memory)
//                P^T = 2^(S^T scale log2e - lse), dS^T = P^T (dP^T - D)
//                dV += P^T dO, dK += dS^T Q        (P^T, dS^T from registers)
//              and with kAtomicDq stage dS^T in shared memory, compute a 64 x 64 share of
//              dQ = dS K * scale and hand it to the copy engine, which adds it to the fp32
//              accumulator in global memory (bulk reduction: one instruction per row).
// dQ split: at D = 128 each consumer takes 64 columns over all 128 keys (it reads both
// consumers' dS^T); at D = 64 each takes its own 64 keys over all columns.
#pragma once
#include <type_traits>

#include "arch/arch.h"
#include "arch/sm90_bulk.h"
#include "arch/sm90_sync.h"
#include "kernels/launch.h"
#include "kernels/bwd_params.h"
#include "mapping/mapping.h"
#include "kernels/tile_io.h"

namespace chiplet_fa::CFA_FAMILY {

// Consumers hold dK, dV (128 registers at D = 128), S^T and dP^T (64), P^T and dS^T packed (32):
// 224 spills in the causal kernels, and 40 + 2 * 232 takes the whole pool of 168 * 3.
template <DType kDType, int kHeadDim, bool kCausal, bool kAtomicDq>
struct BwdKvKernelSm90 : arch::WarpSpecialised<2, 40, 232> {
  using T = typename arch::Element<kDType>::type;
  static constexpr int kDim = arch::padded_head_dim(kHeadDim);
  static constexpr int kBlockN = 64 * kConsumers;
  static constexpr int kBlockM = 64;
  static constexpr int kStages = 2;
  static_assert(kDim == 64 || kDim == 128, "sm_90a backward: head dims up to 128");
  static_assert(geometry(kFamily).bwd_row_pad % kBlockM == 0, "query blocks read lse_log2 and D unchecked");

  using KVTile = arch::SmemTile<kBlockN, kDim>;
  using QTile = arch::SmemTile<kBlockM, kDim>;   // Q or dO of one query block
  using DsTile = arch::SmemTile<kBlockN, kBlockM>;  // dS^T, [key][query]: one 64-column panel
  using SAcc = arch::Acc<1, kBlockM>;           // a warp's 16 keys x 64 queries
  using KeyAcc = arch::Acc<1, kDim>;            // a warp's 16 keys x D
  using DqAcc = arch::Acc<1, 64>;               // a warp's 16 queries x 64 dQ columns
  static constexpr bool kSplitDqCols = kDim == 128;
  static constexpr int kDqKeys = kSplitDqCols ? kBlockN : 64;
  // fp32 dQ staging rows: 8 floats of padding put the 8 rows a warp writes at once on 8
  // different bank groups.
  static constexpr int kDqStride = 64 + 8;

  struct Barriers {
    uint64_t kv_full, full[kStages], empty[kStages];
  };
  struct Smem {
    T k[KVTile::kElems];
    T v[KVTile::kElems];
    T q[kStages][QTile::kElems];
    T dout[kStages][QTile::kElems];
    T ds_t[kAtomicDq ? 2 : 0][DsTile::kElems];  // alternate per step: one barrier a step suffices
    float dq[kAtomicDq ? kConsumers : 0][kBlockM * kDqStride];
    float lse_log2[kStages][kBlockM];
    float delta[kStages][kBlockM];
    Barriers bar;
  };
  static constexpr int kSmemBytes = int(sizeof(Smem));
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per workgroup on sm_90");
  // Named barriers (0 is __syncthreads): dS^T complete; a consumer's dQ staging complete.
  static constexpr int kDsBarrier = 1, kDqBarrier = 2;

  // The query blocks of one query head this workgroup visits: [begin, end), the ones from
  // `plain` on need no mask.
  struct Blocks {
    int begin, plain, end;
  };
  static CFA_DEVICE Blocks blocks(const BwdParams& p, int n0) {
    Blocks b;
    b.end = (p.seqlen_q + kBlockM - 1) / kBlockM;
    b.begin = kCausal ? min(b.end, max(0, n0 - p.causal_offset()) / kBlockM) : 0;
    // Every key of the block is visible to every row from m0 = n0 + kBlockN - 1 - offset on.
    int plain = kCausal ? (max(0, n0 + kBlockN - 1 - p.causal_offset()) + kBlockM - 1) / kBlockM : 0;
    if (n0 + kBlockN > p.seqlen_k) plain = b.end;  // keys past the end: always masked
    b.plain = min(max(plain, b.begin), b.end);
    return b;
  }

  static CFA_DEVICE void run(const BwdParams& p, unsigned char* smem_raw) {
    Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
    const KvTile tile = map_kv_workgroup(p, blockIdx.x);
    if (threadIdx.x == 0) {
      arch::mbarrier_init(&sm.bar.kv_full, kWgThreads);
      for (int s = 0; s < kStages; ++s) {
        arch::mbarrier_init(&sm.bar.full[s], kWgThreads);
        arch::mbarrier_init(&sm.bar.empty[s], kConsumers * kWgThreads);
      }
    }
    __syncthreads();
    const int wg = threadIdx.x / kWgThreads;
    if (wg == 0) {
      arch::release_registers<kProducerRegs>();
      produce(p, sm, tile);
    } else {
      arch::claim_registers<kConsumerRegs>();
      consume(p, sm, tile, wg - 1);
    }
  }

  static CFA_DEVICE void produce(const BwdParams& p, Smem& sm, const KvTile& tile) {
    const int tid = threadIdx.x, n0 = tile.n_block * kBlockN;
    const T* k = static_cast<const T*>(p.k) + tile.batch * p.k_batch_stride + tile.kv_head * p.k_head_stride;
    const T* v = static_cast<const T*>(p.v) + tile.batch * p.v_batch_stride + tile.kv_head * p.v_head_stride;
    load_tile<KVTile, kWgThreads>(sm.k, k, p.k_row_stride, n0, p.seqlen_k, p.head_dim, tid);
    load_tile<KVTile, kWgThreads>(sm.v, v, p.v_row_stride, n0, p.seqlen_k, p.head_dim, tid);
    arch::mbarrier_arrive_on_copies(&sm.bar.kv_full);
    const Blocks mb = blocks(p, n0);
    const int G = p.group_size();
    int it = 0;
    for (int j = 0; j < G; ++j) {
      const int h = tile.kv_head * G + j;
      const T* q = static_cast<const T*>(p.q) + tile.batch * p.q_batch_stride + h * p.q_head_stride;
      const T* dout = static_cast<const T*>(p.dout) + tile.batch * p.do_batch_stride + h * p.do_head_stride;
      const int64_t row_base = (int64_t(tile.batch) * p.num_q_heads + h) * p.seqlen_q_rounded;
      for (int m = mb.begin; m < mb.end; ++m, ++it) {
        const int stage = it % kStages, m0 = m * kBlockM;
        if (it >= kStages) arch::mbarrier_wait(&sm.bar.empty[stage], (it / kStages - 1) & 1);
        load_tile<QTile, kWgThreads>(sm.q[stage], q, p.q_row_stride, m0, p.seqlen_q, p.head_dim, tid);
        load_tile<QTile, kWgThreads>(sm.dout[stage], dout, p.do_row_stride, m0, p.seqlen_q, p.head_dim, tid);
        constexpr int kRowChunks = kBlockM / 4;  // 16-byte pieces of a block's lse_log2 or D
        if (tid < kRowChunks)
          arch::copy_16B_async(&sm.lse_log2[stage][4 * tid], p.lse_log2 + row_base + m0 + 4 * tid, true);
        else if (tid < 2 * kRowChunks)
          arch::copy_16B_async(&sm.delta[stage][4 * (tid - kRowChunks)],
                               static_cast<const float*>(p.softmax_d) + row_base + m0 + 4 * (tid - kRowChunks), true);
        arch::mbarrier_arrive_on_copies(&sm.bar.full[stage]);
      }
    }
    arch::copy_wait_all();  // no copy outlives the thread that issued it
  }

  static CFA_DEVICE void consume(const BwdParams& p, Smem& sm, const KvTile& tile, int cw) {
    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32 - kWgThreads / 32;  // 0..7 over both consumers
    const int wg_tid = threadIdx.x % kWgThreads;
    const int n0 = tile.n_block * kBlockN;
    const int key0 = n0 + warp * 16;  // the warp's first key
    const float scale = float(p.softmax_scale), scale_log2 = scale * float(M_LOG2E);
    // This consumer's dQ share: its rows of dS^T and K, its panel of K's columns.
    const int dq_key0 = kSplitDqCols ? 0 : 64 * cw;
    const int dq_col0 = kSplitDqCols ? 64 * cw : 0;
    const uint32_t dq_bytes = 4u * uint32_t(max(0, min(64, p.head_dim - dq_col0)));
    float* const dq_accum = static_cast<float*>(p.dq_accum);

    KeyAcc dk, dv;
#pragma unroll
    for (int i = 0; i < KeyAcc::kSize; ++i) dk.x[i] = dv.x[i] = 0.f;

    auto step = [&](int it, int h, int m0, auto masked) {
      const int stage = it % kStages;
      const T* sQ = sm.q[stage];
      const T* sdO = sm.dout[stage];
      const float* lse_log2 = sm.lse_log2[stage];
      const float* delta = sm.delta[stage];
      arch::mbarrier_wait(&sm.bar.full[stage], (it / kStages) & 1);
      arch::fence_async_proxy();  // the copies were cp.async (generic proxy) writes
      SAcc s, dp;
      arch::wgmma_fence();
      arch::wgmma_qk<T, kBlockM, kDim, kBlockN>(s, sm.k, sQ, cw);
      arch::wgmma_commit();
      arch::wgmma_qk<T, kBlockM, kDim, kBlockN>(dp, sm.v, sdO, cw);
      arch::wgmma_commit();
      arch::wgmma_wait<1>();
      arch::pin(s.x);
#pragma unroll
      for (int i = 0; i < SAcc::kSize; ++i) {
        const int qi = SAcc::col(i, lane);
        float prob = exp2f(s.x[i] * scale_log2 - lse_log2[qi]);
        if constexpr (decltype(masked)::value) {
          const int key = key0 + SAcc::row(i, lane);
          if (key >= p.seqlen_k || (kCausal && key > m0 + qi + p.causal_offset())) prob = 0.f;
        }
        s.x[i] = prob;  // P^T
      }
      arch::PFrag<T, 1, kBlockM> pf, dsf;
      arch::pack_p(pf, s);
      arch::wgmma_fence();
      arch::wgmma_pv<T, kBlockM, kDim>(dv, pf, sdO);
      arch::wgmma_commit();
      arch::wgmma_wait<1>();  // dP^T (dV += P^T dO may still run)
      arch::pin(dp.x);
#pragma unroll
      for (int i = 0; i < SAcc::kSize; ++i) dp.x[i] = s.x[i] * (dp.x[i] - delta[SAcc::col(i, lane)]);  // dS^T
      arch::pack_p(dsf, dp);
      arch::wgmma_fence();
      arch::wgmma_pv<T, kBlockM, kDim>(dk, dsf, sQ);
      arch::wgmma_commit();
      if constexpr (kAtomicDq) {
        T* ds_t = sm.ds_t[it % 2];
#pragma unroll
        for (int kk = 0; kk < kBlockM / 16; ++kk)
#pragma unroll
          for (int j = 0; j < 4; ++j) {  // fragment word j holds the pair at accumulator index kk * 8 + 2j
            const int i = kk * 8 + 2 * j;
            *reinterpret_cast<uint32_t*>(ds_t + DsTile::offset(warp * 16 + SAcc::row(i, lane), SAcc::col(i, lane))) =
                dsf.a[0][kk][j];
          }
        arch::fence_async_proxy();
        // Before this consumer restages dQ, the copy engine must have read the previous share.
        if (wg_tid < kBlockM) arch::bulk_wait_read<0>();
        arch::named_barrier_sync(kDsBarrier, kConsumers * kWgThreads);
        DqAcc dq;
        arch::wgmma_fence();
        arch::wgmma_tn<T, kDqKeys, kBlockN, kBlockN>(dq, ds_t + dq_key0 * 64, sm.k + (dq_col0 / 64) * KVTile::kPanel + dq_key0 * 64);
        arch::wgmma_commit();
        arch::wgmma_wait<0>();
        arch::pin(dq.x);
        float* sdq = sm.dq[cw];
#pragma unroll
        for (int i = 0; i < DqAcc::kSize; i += 2) {
          const int r = (warp % 4) * 16 + DqAcc::row(i, lane), c = DqAcc::col(i, lane);
          *reinterpret_cast<float2*>(sdq + r * kDqStride + c) = make_float2(dq.x[i] * scale, dq.x[i + 1] * scale);
        }
        arch::fence_async_proxy();
        arch::named_barrier_sync(kDqBarrier + cw, kWgThreads);
        const int row = m0 + wg_tid;
        if (wg_tid < kBlockM && row < p.seqlen_q && dq_bytes > 0) {
          arch::bulk_reduce_add(dq_accum + ((int64_t(tile.batch) * p.seqlen_q + row) * p.num_q_heads + h) * p.head_dim + dq_col0,
                                sdq + wg_tid * kDqStride, dq_bytes);
          arch::bulk_commit();
        }
      } else {
        arch::wgmma_wait<0>();
      }
      arch::pin(dk.x);
      arch::pin(dv.x);
      arch::pin(pf.a);
      arch::pin(dsf.a);
      // Every thread releases the stage: an arrival orders only its own thread's reads (here
      // lse_log2 and D; wgmma_wait covered the tensor cores' reads of Q and dO).
      arch::mbarrier_arrive(&sm.bar.empty[stage]);
    };

    const Blocks mb = blocks(p, n0);
    if (mb.begin < mb.end) {
      arch::mbarrier_wait(&sm.bar.kv_full, 0);
      const int G = p.group_size();
      int it = 0;
      for (int j = 0; j < G; ++j) {
        const int h = tile.kv_head * G + j;
        int m = mb.begin;
        for (; m < mb.plain; ++m, ++it) step(it, h, m * kBlockM, std::true_type{});
        for (; m < mb.end; ++m, ++it) step(it, h, m * kBlockM, std::false_type{});
      }
    }
    if constexpr (kAtomicDq) arch::bulk_wait_all();

    T* dk_out = static_cast<T*>(p.dk) + tile.batch * p.dk_batch_stride + tile.kv_head * p.dk_head_stride;
    T* dv_out = static_cast<T*>(p.dv) + tile.batch * p.dv_batch_stride + tile.kv_head * p.dv_head_stride;
#pragma unroll
    for (int i = 0; i < KeyAcc::kSize; i += 2) {
      const int key = key0 + KeyAcc::row(i, lane), col = KeyAcc::col(i, lane);
      if (key < p.seqlen_k && col < p.head_dim) {  // head_dim is even: the pair is in or out
        *reinterpret_cast<uint32_t*>(dk_out + key * p.dk_row_stride + col) = arch::pack2<T>(dk.x[i] * scale, dk.x[i + 1] * scale);
        *reinterpret_cast<uint32_t*>(dv_out + key * p.dv_row_stride + col) = arch::pack2<T>(dv.x[i], dv.x[i + 1]);
      }
    }
  }
};

template <DType kDType, int kHeadDim, bool kCausal, bool kAtomicDq>
CFA_GLOBAL void __launch_bounds__((BwdKvKernelSm90<kDType, kHeadDim, kCausal, kAtomicDq>::kThreads), 1)
    bwd_kv_kernel_sm90(const BwdParams p) {
  BwdKvKernelSm90<kDType, kHeadDim, kCausal, kAtomicDq>::run(p, dynamic_smem());
}

}  // namespace chiplet_fa::CFA_FAMILY
