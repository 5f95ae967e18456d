// FlashAttention forward for sm_90a, warp-specialised in the manner FlashAttention-3 describes.
// A workgroup of three warpgroups computes a 128 x D tile of the output, chosen by
// map_workgroup like every other forward kernel:
//   producer    (warpgroup 0) copies Q once and K/V blocks into a ring of kStages buffers
//               with cp.async; mbarriers per buffer say "landed" (k_full, v_full) and
//               "free again" (k_empty, v_empty).
//   consumers   (warpgroups 1, 2) own 64 query rows each. They take turns on the tensor cores
//               (two named barriers, "ping-pong"): while one warpgroup's QK^T and PV products
//               run, the other computes its softmax, which on one workgroup per SM would
//               otherwise leave the tensor cores idle for a third of every step.
// Per step a consumer issues QK^T of this key block and PV of the previous one back to back,
// hands the turn over, runs the softmax of this block as soon as QK^T is complete (PV still
// running), then rescales O and packs P once PV is done. setmaxnreg moves registers from the producer to the consumers.
#pragma once
#include <type_traits>

#include "arch/arch.h"
#include "arch/sm90_sync.h"
#include "kernels/fwd_params.h"
#include "mapping/mapping.h"
#include "kernels/online_softmax.h"
#include "kernels/scores.h"
#include "kernels/tile_io.h"

namespace chiplet_fa::CFA_FAMILY {

// 65536 / 384 = 168 registers a thread at launch; the producer gives most of its share to the
// consumers (56 * 128 + 224 * 256 = 168 * 384).
// kPlain: scores without softcap or ALiBi, a kernel of its own so that the common case keeps the
// registers and instruction footprint of a loop without them.
template <DType kDType, int kHeadDim, bool kWindowed, bool kPlain>
struct FwdKernel : arch::WarpSpecialised<2, 56, 224> {
  using T = typename arch::Element<kDType>::type;
  static constexpr int kDim = arch::padded_head_dim(kHeadDim);
  static constexpr int kBlockM = 64 * kConsumers;
  static constexpr int kBlockN = arch::block_n(kDim);

  using QTile = arch::SmemTile<kBlockM, kDim>;
  using KVTile = arch::SmemTile<kBlockN, kDim>;
  // K/V buffers: three where they fit beside Q in the 227 KB a workgroup may use, else two.
  static constexpr int kMaxSmemBytes = 227 * 1024;
  static constexpr int kStages =
      (QTile::kElems + 6 * KVTile::kElems) * int(sizeof(T)) + 256 <= kMaxSmemBytes ? 3 : 2;
  using SAcc = arch::Acc<1, kBlockN>;
  using OAcc = arch::Acc<1, kDim>;
  using Softmax = OnlineSoftmax<SAcc, OAcc, kBlockN, kWindowed>;
  struct Barriers {
    uint64_t q_full, k_full[kStages], v_full[kStages], k_empty[kStages], v_empty[kStages];
  };
  // This workgroup's tile: its head's slabs in global memory, and the rows and key blocks it
  // covers. Kept in shared memory and read where used: the consumers' registers are all but taken
  // by O and the scores.
  struct TileInfo {
    FwdParams::HeadSlabs<T> g;
    Tile tile;
    Sequence seq;
    KeyWindow window;
    int m0;
    BlockRange keys;  // key blocks some row sees
    CFA_DEVICE int n_blocks() const { return keys.end - keys.first; }
  };
  static constexpr int kTileBytes = (QTile::kElems + 2 * kStages * KVTile::kElems) * int(sizeof(T));
  static constexpr int kSmemBytes = kTileBytes + int(sizeof(Barriers)) + int(sizeof(TileInfo));
  static_assert(kSmemBytes <= kMaxSmemBytes, "shared memory per workgroup on sm_90");
  // Named barrier ids (0 is __syncthreads): a consumer's turn, a consumer's epilogue.
  static constexpr int kTurnBarrier = 1, kEpilogueBarrier = 1 + kConsumers;
  static constexpr int kConsumerWarps = kConsumers * kWgThreads / 32;

  // Where the tile, the K/V ring and the barriers are in shared memory.
  struct Slabs {
    T* sQ;
    T* sK;
    T* sV;
    Barriers* bar;
    const TileInfo* info;
  };

  static CFA_DEVICE TileInfo tile_info(const FwdParams& p, const GridShape& grid) {
    TileInfo i;
    i.tile = map_workgroup(p.mapping, blockIdx.x, grid);
    i.seq = p.sequence(i.tile.batch);
    i.window = p.key_window(i.seq);
    i.m0 = i.tile.m_block * kBlockM;
    i.keys = key_blocks(i.window, i.m0, min(i.m0 + kBlockM, i.seq.len_q) - 1, kBlockN);
    i.g = p.head_slabs<T>(i.tile.batch, i.tile.q_head, i.seq);
    return i;
  }

  static CFA_DEVICE void run(const FwdParams& p, unsigned char* smem) {
    const GridShape grid = p.grid_shape();
    if (blockIdx.x >= grid_size(grid)) return;  // a ragged grid is launched with a bound
    Slabs t;
    t.sQ = reinterpret_cast<T*>(smem);
    t.sK = t.sQ + QTile::kElems;
    t.sV = t.sK + kStages * KVTile::kElems;
    t.bar = reinterpret_cast<Barriers*>(smem + kTileBytes);
    TileInfo* info = reinterpret_cast<TileInfo*>(smem + kTileBytes + sizeof(Barriers));
    t.info = info;

    if (threadIdx.x == 0) {
      *info = tile_info(p, grid);
      arch::mbarrier_init(&t.bar->q_full, kWgThreads);
      for (int s = 0; s < kStages; ++s) {
        arch::mbarrier_init(&t.bar->k_full[s], kWgThreads);
        arch::mbarrier_init(&t.bar->v_full[s], kWgThreads);
        arch::mbarrier_init(&t.bar->k_empty[s], kConsumerWarps);  // one arrival a warp
        arch::mbarrier_init(&t.bar->v_empty[s], kConsumerWarps);
      }
    }
    __syncthreads();

    const int wg = threadIdx.x / kWgThreads;
    if (wg == 0) {
      arch::release_registers<kProducerRegs>();
      produce(p, t);
    } else {
      arch::claim_registers<kConsumerRegs>();
      consume(p, t, wg - 1);
    }
  }

  // Ring position it (0, 1, ...) holds key block keys.first + it.
  static CFA_DEVICE void produce(const FwdParams& p, const Slabs& t) {
    const TileInfo& info = *t.info;
    // A dense batch's key count is a kernel parameter: with it the compiler strength-reduces the
    // row addresses and validity of the copies across the loop (from shared memory, after every
    // barrier wait, it recomputes them: 50% more instructions in the producer's loop).
    if (p.cu_seqlens_k)
      produce_keys(p, t, info.g, info.m0, info.seq.len_q, info.seq.len_k, info.keys);
    else
      produce_keys(p, t, info.g, info.m0, p.seqlen_q, p.seqlen_k, info.keys);
  }

  static CFA_DEVICE void produce_keys(const FwdParams& p, const Slabs& t, const FwdParams::HeadSlabs<T> g, int m0,
                                      int len_q, int len_k, const BlockRange keys) {
    const int n_blocks = keys.end - keys.first;
    if (n_blocks == 0) return;  // the consumers read nothing either
    const int tid = threadIdx.x;
    load_tile<QTile, kWgThreads>(t.sQ, g.q, p.q_row_stride, m0, len_q, p.head_dim, tid);
    arch::mbarrier_arrive_on_copies(&t.bar->q_full);
    for (int it = 0; it < n_blocks; ++it) {
      const int stage = it % kStages, n0 = (keys.first + it) * kBlockN;
      // Use j of a buffer waits until both consumers released use j - 1. K of a block is
      // released a step before its V (QK^T runs a step ahead of PV).
      const uint32_t released = (it / kStages - 1) & 1;
      if (it >= kStages) arch::mbarrier_wait(&t.bar->k_empty[stage], released);
      load_tile<KVTile, kWgThreads>(t.sK + stage * KVTile::kElems, g.k, p.k_row_stride, n0, len_k, p.head_dim, tid);
      arch::mbarrier_arrive_on_copies(&t.bar->k_full[stage]);
      if (it >= kStages) arch::mbarrier_wait(&t.bar->v_empty[stage], released);
      load_tile<KVTile, kWgThreads>(t.sV + stage * KVTile::kElems, g.v, p.v_row_stride, n0, len_k, p.head_dim, tid);
      arch::mbarrier_arrive_on_copies(&t.bar->v_full[stage]);
    }
    arch::copy_wait_all();  // no copy outlives the thread that issued it
  }


  static CFA_DEVICE void consume(const FwdParams& p, const Slabs& t, int cw) {
    const TileInfo& info = *t.info;
    const ScoreMod mod(p, info.tile.batch, info.tile.q_head, info.seq);
    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32 - kWgThreads / 32;  // 0..7 over both consumers
    const int warp_row0 = info.m0 + warp * 16;
    const int n_blocks = info.n_blocks();
    const int turn = kTurnBarrier + cw, other_turn = kTurnBarrier + (1 - cw);
    constexpr int kTurnThreads = kConsumers * kWgThreads;

    OAcc o;
#pragma unroll
    for (int i = 0; i < OAcc::kSize; ++i) o.x[i] = 0.f;
    SAcc s;
    arch::PFrag<T, 1, kBlockN> pf;
    Softmax softmax;

    // Step it issues QK^T of ring position it (key block keys.first + it) and PV of position
    // it - 1. The first and last steps, and the blocks that need masking, are separate
    // instantiations: ptxas serialises a wgmma under a runtime branch, and if-converts a masking
    // branch into selects on every block.
    auto step = [&](int it, auto has_qk, auto has_pv, auto masked) {
      constexpr bool kQK = decltype(has_qk)::value, kPV = decltype(has_pv)::value;
      const int stage = it % kStages, prev = (it + kStages - 1) % kStages;
      if constexpr (kQK) arch::mbarrier_wait(&t.bar->k_full[stage], (it / kStages) & 1);
      if constexpr (kPV) arch::mbarrier_wait(&t.bar->v_full[prev], ((it - 1) / kStages) & 1);
      arch::fence_async_proxy();  // the copies were cp.async (generic proxy) writes
      arch::named_barrier_sync(turn, kTurnThreads);
      arch::wgmma_fence();
      // QK^T first, in a group of its own: the softmax starts when it completes, while PV of
      // the previous block still runs (FA3's intra-warpgroup overlap, with no second S in
      // registers: P of the previous block stays packed until PV is done with it).
      if constexpr (kQK) {
        arch::wgmma_qk<T, kBlockN, kDim, kBlockM>(s, t.sQ, t.sK + stage * KVTile::kElems, cw);
        arch::wgmma_commit();
      }
      if constexpr (kPV) {
        arch::wgmma_pv<T, kBlockN, kDim>(o, pf, t.sV + prev * KVTile::kElems);
        arch::wgmma_commit();
      }
      // Every turn is handed over except the last one of consumer 1, which nobody awaits.
      if (kQK || cw == 0) arch::named_barrier_arrive(other_turn, kTurnThreads);
      typename Softmax::Rescale rescale{false, {}};
      if constexpr (kQK) {
        arch::wgmma_wait<kPV ? 1 : 0>();
        arch::pin(s.x);
        // wgmma_wait is warp-collective: the whole warp is done with the buffer.
        if (lane == 0) arch::mbarrier_arrive(&t.bar->k_empty[stage]);
        const int n0 = (info.keys.first + it) * kBlockN;
        mod.to_logits<kPlain>(s, warp_row0, n0, lane);
        if constexpr (decltype(masked)::value) softmax.mask(s, info.window, n0, warp_row0, lane);
        rescale = softmax.fold(s, mod.exp_scale<kPlain>());
      }
      if constexpr (kPV) {
        arch::wgmma_wait<0>();
        arch::pin(o.x);
        arch::pin(pf.a);
        if (lane == 0) arch::mbarrier_arrive(&t.bar->v_empty[prev]);
      }
      if constexpr (kQK) {
        Softmax::rescale(o, rescale);
        arch::pack_p(pf, s);
      }
    };
    if (n_blocks > 0) {
      arch::mbarrier_wait(&t.bar->q_full, 0);
      if (cw == 1) arch::named_barrier_arrive(other_turn, kTurnThreads);  // consumer 0 starts
      // Ring positions [plain_lo, plain_hi) hold blocks that no row of this workgroup masks.
      const BlockRange plain = unmasked_blocks(info);
      const int plain_lo = min(n_blocks, max(0, plain.first - info.keys.first));
      const int plain_hi = max(plain_lo, min(n_blocks, plain.end - info.keys.first));
      using yes = std::true_type;
      using no = std::false_type;
      if (plain_lo == 0 && plain_hi > 0)
        step(0, yes{}, no{}, no{});
      else
        step(0, yes{}, no{}, yes{});
      int it = 1;
      for (; it < plain_lo; ++it) step(it, yes{}, yes{}, yes{});
      for (; it < plain_hi; ++it) step(it, yes{}, yes{}, no{});
      for (; it < n_blocks; ++it) step(it, yes{}, yes{}, yes{});
      step(n_blocks, no{}, yes{}, no{});
    }

    float inv_sum[Softmax::kSlots];
    softmax.finish(inv_sum, info.g.lse, info.seq.len_q, warp_row0, lane);
    // Stage O in this consumer's own rows of the Q tile: its QK^T products are complete and
    // the other consumer reads only its own rows.
    stage_output<QTile>(t.sQ, o, inv_sum, warp * 16, lane);
    arch::named_barrier_sync(kEpilogueBarrier + cw, kWgThreads);
    store_tile<QTile, kWgThreads>(info.g.out, p.o_row_stride, t.sQ, info.m0, cw * 64, cw * 64 + 64, info.seq.len_q,
                                  p.head_dim, threadIdx.x % kWgThreads);
  }

  // Key blocks every row of the tile sees whole (no mask needed): after the last row's window
  // begins, before the first row's ends, inside the sequence.
  static CFA_DEVICE BlockRange unmasked_blocks(const TileInfo& info) {
    if constexpr (!kWindowed) return BlockRange{0, info.seq.len_k / kBlockN};
    const int last_row = min(info.m0 + kBlockM, info.seq.len_q) - 1;
    return BlockRange{(info.window.begin(last_row) + kBlockN - 1) / kBlockN, info.window.end(info.m0) / kBlockN};
  }
};

// The bound is parenthesised: the template argument list's commas would otherwise split the
// macro argument. One workgroup per SM: the consumers take all the registers.
template <DType kDType, int kHeadDim, bool kWindowed, bool kPlain>
CFA_GLOBAL void __launch_bounds__((FwdKernel<kDType, kHeadDim, kWindowed, kPlain>::kThreads), 1)
    fwd_kernel(const FwdParams p) {
  FwdKernel<kDType, kHeadDim, kWindowed, kPlain>::run(p, dynamic_smem());
}

}  // namespace chiplet_fa::CFA_FAMILY
