// FlashAttention forward for sm_90a, warp-specialised in the manner FlashAttention-3 describes.
// Persistent workers (kernels/sm90/tile_scheduler.h), one per SM, each take 64 * kConsumers x D output tiles
// from the work queue of their L2 domain, in map_workgroup's order. A worker has a producer and
// two consumer warpgroups (three up to D = 64: 192 x D tiles):
//   producer    (one warp of warpgroup 0) has the copy engine (TMA) bring each tile's Q and its
//               K/V blocks into a ring of kStages buffers; mbarriers per buffer say "landed"
//               (k_full, v_full: the bytes arrived) and "free again" (k_empty, v_empty), q_full and
//               q_empty do the same for Q. The ring runs on across tiles: the next tile's Q and
//               first K/V blocks land while the consumers finish the last one.
//   scheduler   (lane 0 of warpgroup 0's second warp) claims each tile from the queue and
//               describes it (map_workgroup, the sequence, the key blocks) into a slot in shared
//               memory, a tile ahead of the producer: info_full says a slot is written.
//   consumers   (warpgroups 1, 2, ...: kernels/sm90/fwd_consumer.h) own 64 query rows each. They
//               take turns on the tensor cores (a named barrier each, "ping-pong"): while one
//               warpgroup's QK^T and PV products run, the others compute their softmax, which on
//               one workgroup per SM would otherwise leave the tensor cores idle for a third of
//               every step.
// Per step a consumer issues QK^T of this key block and PV of the previous one back to back,
// hands the turn over, runs the softmax of this block as soon as QK^T is complete (PV still
// running), then rescales O and packs P once PV is done. O goes from registers to global memory
// (kernels/sm90/epilogue.h). setmaxnreg moves registers from the producer to the consumers.
#pragma once
#include <type_traits>

#include "arch/arch.h"
#include "arch/sm90_sync.h"
#include "arch/sm90_tma.h"
#include "kernels/fwd_params.h"
#include "kernels/online_softmax.h"
#include "kernels/scores.h"
#include "kernels/sm90/epilogue.h"
#include "kernels/sm90/tma_params.h"
#include "kernels/sm90/tile_scheduler.h"
#include "kernels/sm90/trace_events.h"
#include "kernels/tile_io.h"
#include "kernels/tile_sizes.h"
#include "mapping/mapping.h"

namespace chiplet_fa::CFA_FAMILY {

// The forward's tiles and warpgroups (kernels/tile_sizes.h) for kHeadDim in kDType.
template <DType kDType, int kHeadDim>
inline constexpr Sm90FwdTiling kFwdTilingSm90 =
    sm90_fwd_tiling(kHeadDim, int(sizeof(typename arch::Element<kDType>::type)));
template <DType kDType, int kHeadDim>
using FwdWarps = arch::WarpSpecialised<kFwdTilingSm90<kDType, kHeadDim>.warps.consumers,
                                       kFwdTilingSm90<kDType, kHeadDim>.warps.producer_regs,
                                       kFwdTilingSm90<kDType, kHeadDim>.warps.consumer_regs>;

// kPlain: scores without softcap or ALiBi, a kernel of its own so that the common case keeps the
// registers and instruction footprint of a loop without them.
template <DType kDType, int kHeadDim, bool kWindowed, bool kPlain>
struct FwdKernelSm90 : FwdWarps<kDType, kHeadDim> {
  using Warps = FwdWarps<kDType, kHeadDim>;
  using Warps::kConsumers, Warps::kWgThreads, Warps::kProducerRegs, Warps::kConsumerRegs;
  using T = typename arch::Element<kDType>::type;
  static constexpr int kDim = arch::padded_head_dim(kHeadDim);  // shared-memory tiles: whole panels
  // The columns the products cover: at D = 96 QK^T and PV skip the last panel's upper half (zero),
  // as in the backward (kernels/sm90/bwd_kernel_sm90.h).
  static constexpr int kCols = kHeadDim;
  static_assert(kCols % 32 == 0 && kCols <= kDim, "head dims of whole 32-column halves of a panel");
  static constexpr Sm90FwdTiling kTiling = kFwdTilingSm90<kDType, kHeadDim>;
  static constexpr int kBlockM = kTiling.block_m;
  static constexpr int kBlockN = kTiling.block_n;
  static constexpr int kPanels = kDim / arch::kTmaBoxCols;

  using QTile = arch::SmemTile<kBlockM, kDim>;
  using KVTile = arch::SmemTile<kBlockN, kDim>;
  // Q buffers and K/V buffers, in the shared memory a workgroup may use.
  static constexpr int kQStages = kTiling.q_stages;
  static constexpr int kStages = kTiling.kv_stages;
  static constexpr uint32_t kQBytes = QTile::kElems * sizeof(T), kKVBytes = KVTile::kElems * sizeof(T);
  using SAcc = arch::Acc<1, kBlockN>;
  using OAcc = arch::Acc<1, kCols>;
  using Softmax = OnlineSoftmax<SAcc, OAcc, kBlockN, kWindowed>;
  // Full barriers take one arrival from each lane of the producer warp (lane 0's also expects the
  // copy engine's bytes); q_empty one from every consumer thread, k/v_empty one per consumer warp.
  static constexpr int kProducerLanes = 32;
  static constexpr int kConsumerThreads = kConsumers * kWgThreads, kConsumerWarps = kConsumerThreads / 32;
  static constexpr int kInfoSlots = kQStages + 2;
  struct Barriers {
    uint64_t q_full[kQStages], q_empty[kQStages];
    uint64_t k_full[kStages], v_full[kStages], k_empty[kStages], v_empty[kStages];
    uint64_t info_full[kInfoSlots];  // the scheduler wrote the slot
    uint64_t claim_next;             // the producer started a tile: the scheduler may claim the next
  };
  // Split tiles (kernels/tail_split.h) are equal tiles: no window. Not with three consumers (D <=
  // 64): their 160 registers did not hold the merge, and the step loop spilled (34 stores). A
  // slot holds the consumers' O, then each thread's row maxima and sums, as float4 in thread order
  // (a warp's loads and stores are whole lines).
  static constexpr bool kSplits = !kWindowed && kConsumers == 2;
  static_assert(OAcc::kSize % 4 == 0 && Softmax::kSlots == 2, "a thread's part of a slot in float4");
  static constexpr int kSlotFloats = kConsumerThreads * (OAcc::kSize + 4);
  struct Piece {
    int32_t piece_slot;  // a piece of a split tile: its slot; -1 for a whole tile
    int32_t tail_tile;   // the split tile's index among them
  };
  struct NoPiece {};  // the kernels that never split keep their TileInfo (two fields more spilled at D = 64)

  // One tile: its head's slabs in global memory, and the rows and key blocks it covers. Written
  // by the scheduler a tile ahead, read from shared memory where used: the consumers' registers are
  // all but taken by O and the scores. Slot n % kInfoSlots holds tile n (see produce).
  struct TileInfo : std::conditional_t<kSplits, Piece, NoPiece> {
    bool none;  // no tile: the worker's queue is empty, the consumers stop
    FwdParams::HeadSlabs<T> g;
    Tile tile;
    Sequence seq;
    KeyWindow window;
    int m0;
    int tma_batch;    // the tensor maps' batch coordinate: a packed batch is one row of sequences
    BlockRange keys;  // key blocks some row sees (a piece's share of them)
    CFA_DEVICE int n_blocks() const { return keys.end - keys.first; }
  };
  static constexpr int kTileBytes = (kQStages * QTile::kElems + 2 * kStages * KVTile::kElems) * int(sizeof(T));
  static constexpr int kSmemBytes = kTileBytes + int(sizeof(Barriers)) + kInfoSlots * int(sizeof(TileInfo));
  static_assert(kSmemBytes <= kSm90SmemBytes, "shared memory per workgroup on sm_90");
  // Named barriers 1, 2, ...: consumer c's turn (0 is __syncthreads), taken by c and handed over
  // by the consumer before it.
  static constexpr int kTurnBarrier = 1, kTurnThreads = 2 * kWgThreads;

  // Where the tiles, the K/V ring, the barriers and the tile slots are in shared memory.
  struct Slabs {
    T* sQ;
    T* sK;
    T* sV;
    Barriers* bar;
    TileInfo* info;
  };

  // Tile wid, or (piece.slot >= 0) a piece of it.
  static CFA_DEVICE TileInfo tile_info(const FwdParams& p, const GridShape& grid, int64_t wid,
                                       const TailPiece& piece) {
    TileInfo i;
    i.none = false;
    i.tile = map_workgroup(p.mapping, wid, grid);
    i.seq = p.sequence(i.tile.batch);
    i.window = p.key_window(i.seq);
    i.m0 = i.tile.m_block * kBlockM;
    i.tma_batch = p.cu_seqlens_q ? 0 : i.tile.batch;
    i.keys = key_blocks(i.window, i.m0, min(i.m0 + kBlockM, i.seq.len_q) - 1, kBlockN);
    i.g = p.head_slabs<T>(i.tile.batch, i.tile.q_head, i.seq);
    if constexpr (kSplits) {
      i.piece_slot = piece.slot;
      i.tail_tile = piece.tile;
      if (piece.slot >= 0) i.keys = BlockRange{i.keys.first + piece.first, i.keys.first + piece.end};
    }
    return i;
  }

  static CFA_DEVICE void run(const TmaFwdParams& a, unsigned char* smem) {
    Slabs t;
    t.sQ = reinterpret_cast<T*>(smem);
    t.sK = t.sQ + kQStages * QTile::kElems;
    t.sV = t.sK + kStages * KVTile::kElems;
    t.bar = reinterpret_cast<Barriers*>(smem + kTileBytes);
    t.info = reinterpret_cast<TileInfo*>(smem + kTileBytes + sizeof(Barriers));
    if (threadIdx.x == 0) {
      for (int s = 0; s < kQStages; ++s) {
        arch::mbarrier_init(&t.bar->q_full[s], kProducerLanes);
        arch::mbarrier_init(&t.bar->q_empty[s], kConsumerThreads);
      }
      for (int s = 0; s < kStages; ++s) {
        arch::mbarrier_init(&t.bar->k_full[s], kProducerLanes);
        arch::mbarrier_init(&t.bar->v_full[s], kProducerLanes);
        arch::mbarrier_init(&t.bar->k_empty[s], kConsumerWarps);
        arch::mbarrier_init(&t.bar->v_empty[s], kConsumerWarps);
      }
      for (int s = 0; s < kInfoSlots; ++s) arch::mbarrier_init(&t.bar->info_full[s], 1);
      arch::mbarrier_init(&t.bar->claim_next, 1);
    }
    __syncthreads();

    const int wg = arch::warp_uniform(threadIdx.x / kWgThreads);
    if (wg == 0) {
      arch::release_registers<kProducerRegs>();
      if (threadIdx.x < kProducerLanes) produce(a, t);
      else if (threadIdx.x == kProducerLanes) schedule(a.p, t);  // the other lanes and warps have nothing to do
    } else {
      arch::claim_registers<kConsumerRegs>();
      Consumer::consume(a.p, a.trace, t, wg - 1);
    }
  }

  // Ring position r (0, 1, ... over all of this worker's tiles) is buffer r % kStages, its use
  // r / kStages; use u waits until both consumers released use u - 1. Tile n takes Q buffer
  // n % kQStages the same way.
  static CFA_DEVICE int stage_of(int r) { return r % kStages; }
  static CFA_DEVICE uint32_t phase_of(int r) { return (r / kStages) & 1; }
  // A ring position as buffer and phase, stepped without a division (the consumers' loop).
  struct RingSlot {
    int stage;
    uint32_t phase;
    CFA_DEVICE void next() {
      if (++stage == kStages) {
        stage = 0;
        phase ^= 1;
      }
    }
  };
  static CFA_DEVICE uint32_t q_phase_of(int n) { return (n / kQStages) & 1; }

  // Tile n + 1 is claimed and described once the producer has tile n's Q and first K/V block under
  // way (claim_next), into slot (n + 1) % kInfoSlots, so that the next tile's Q can follow tile n's
  // last K/V copy at once. The slot is free by then: tile n's Q buffer was released after the last
  // QK^T of tile n - kQStages, so the consumers are done with tile n + 1 - kInfoSlots. A slot holding
  // no tile tells the producer and the consumers to stop. On a warp of its own, not the producer's
  // lane 0, where the queue's atomic and the mapping's divisions (and their spills) held the tile's
  // second K/V copy (docs/sm90_forward.md, "Claiming the next tile"). A tail split's unit comes
  // as one or two work items (FwdTileScheduler), so its pieces go to consecutive slots.
  static CFA_DEVICE void schedule(const FwdParams& p, const Slabs& t) {
    const GridShape grid = p.grid_shape();
    FwdTileScheduler<FwdKernelSm90> scheduler(p, grid);
    for (int n = 0;; ++n) {
      if (n > 0) arch::mbarrier_wait(&t.bar->claim_next, (n - 1) & 1);
      TailPiece piece;
      const int64_t wid = scheduler.next(piece);
      TileInfo& slot = t.info[n % kInfoSlots];
      if (wid >= 0) slot = tile_info(p, grid, wid, piece);
      else slot.none = true;
      arch::mbarrier_arrive(&t.bar->info_full[n % kInfoSlots]);
      if (wid < 0) return;
    }
  }

  static CFA_DEVICE void produce(const TmaFwdParams& a, const Slabs& t) {
    for (int n = 0, ring = 0;; ++n) {
      const int qs = n % kQStages;
      if (n >= kQStages) arch::mbarrier_wait(&t.bar->q_empty[qs], q_phase_of(n) ^ 1);
      arch::mbarrier_wait(&t.bar->info_full[n % kInfoSlots], (n / kInfoSlots) & 1);
      const TileInfo& info = t.info[n % kInfoSlots];
      if (info.none) {
        arch::mbarrier_arrive(&t.bar->q_full[qs]);
        return;
      }
      // The first K/V block goes out before the next claim: with Q it is all the consumers wait for.
      produce_q(a, t, info, n);
      produce_kv(a, t, info, 0, min(1, info.n_blocks()), ring);
      if (threadIdx.x == 0) arch::mbarrier_arrive(&t.bar->claim_next);
      produce_kv(a, t, info, min(1, info.n_blocks()), info.n_blocks(), ring);
    }
  }

  // Tile n's Q into its buffer; every producer lane arrives on its q_full.
  static CFA_DEVICE void produce_q(const TmaFwdParams& a, const Slabs& t, const TileInfo& info, int n) {
    uint64_t* full = &t.bar->q_full[n % kQStages];
    if (threadIdx.x != 0 || info.n_blocks() == 0) {
      arch::mbarrier_arrive(full);  // no keys: the consumers write zeros and read no Q
      return;
    }
    arch::mbarrier_arrive_expect_tx(full, kQBytes);
#pragma unroll
    for (int c = 0; c < kPanels; ++c)
      arch::tma_load_4d(t.sQ + (n % kQStages) * QTile::kElems + c * QTile::kPanel, &a.q, c * arch::kTmaBoxCols,
                        int(info.seq.q_start) + info.m0, info.tile.q_head, info.tma_batch, full);
  }

  // Blocks [j0, j1) of a tile's K/V into the ring from position ring on (advanced past them).
  static CFA_DEVICE void produce_kv(const TmaFwdParams& a, const Slabs& t, const TileInfo& info, int j0, int j1,
                                    int& ring) {
    const FwdParams& p = a.p;
    const int lane = threadIdx.x;
    const bool packed = p.cu_seqlens_q != nullptr;
    const int kv_head = info.tile.q_head / p.group_size();
    const int k_row = int(info.seq.k_start);
    for (int j = j0; j < j1; ++j, ++ring) {
      const int stage = stage_of(ring), n0 = (info.keys.first + j) * kBlockN;
      // The last block of a packed sequence would bring the next sequence's rows: copied by hand.
      const bool by_hand = packed && n0 + kBlockN > info.seq.len_k;
      // K of a block is released a step before its V (QK^T runs a step ahead of PV).
      if (ring >= kStages) arch::mbarrier_wait(&t.bar->k_empty[stage], phase_of(ring) ^ 1);
      load_kv(t.sK + stage * KVTile::kElems, &a.k, info.g.k, p.k_row_stride, &t.bar->k_full[stage], k_row, n0,
              kv_head, info.tma_batch, info.seq.len_k, p.head_dim, by_hand, lane);
      if (ring >= kStages) arch::mbarrier_wait(&t.bar->v_empty[stage], phase_of(ring) ^ 1);
      load_kv(t.sV + stage * KVTile::kElems, &a.v, info.g.v, p.v_row_stride, &t.bar->v_full[stage], k_row, n0,
              kv_head, info.tma_batch, info.seq.len_k, p.head_dim, by_hand, lane);
    }
  }

  // One K or V block of keys [n0, n0 + kBlockN) into dst; every producer lane arrives on full.
  static CFA_DEVICE void load_kv(T* dst, const CUtensorMap* map, const T* g, int64_t row_stride, uint64_t* full,
                                 int k_row, int n0, int kv_head, int batch, int len_k, int head_dim, bool by_hand,
                                 int lane) {
    if (by_hand) {  // cp.async with zero-fill past the sequence, fenced for the tensor cores' reads
      // A rolled loop: the producer's few registers hold one copy's addresses, not a tile's.
      constexpr int kChunks = kDim / 8;
#pragma unroll 1
      for (int c = lane; c < kBlockN * kChunks; c += kProducerLanes) {
        const int r = c / kChunks, col = (c % kChunks) * 8;
        const bool valid = n0 + r < len_k && col < head_dim;
        arch::copy_16B_async(dst + KVTile::offset(r, col), valid ? g + (n0 + r) * row_stride + col : g, valid);
      }
      arch::copy_wait_all();
      arch::fence_async_proxy();
      arch::mbarrier_arrive(full);
      return;
    }
    if (lane == 0) {
      arch::mbarrier_arrive_expect_tx(full, kKVBytes);
#pragma unroll
      for (int c = 0; c < kPanels; ++c)
        arch::tma_load_4d(dst + c * KVTile::kPanel, map, c * arch::kTmaBoxCols, k_row + n0, kv_head, batch, full);
    } else {
      arch::mbarrier_arrive(full);
    }
  }

  struct Consumer;  // warpgroups 1, 2, ...: kernels/sm90/fwd_consumer.h
};

}  // namespace chiplet_fa::CFA_FAMILY

#include "kernels/sm90/fwd_consumer.h"

namespace chiplet_fa::CFA_FAMILY {

// The bound is parenthesised: the template argument list's commas would otherwise split the
// macro argument. One workgroup per SM: the consumers take all the registers. The parameter
// lives in constant memory (__grid_constant__): the copy engine reads the tensor maps from there.
template <DType kDType, int kHeadDim, bool kWindowed, bool kPlain>
CFA_GLOBAL void __launch_bounds__((FwdKernelSm90<kDType, kHeadDim, kWindowed, kPlain>::kThreads), 1)
    fwd_kernel_sm90(const __grid_constant__ TmaFwdParams a) {
  FwdKernelSm90<kDType, kHeadDim, kWindowed, kPlain>::run(a, dynamic_smem());
}

}  // namespace chiplet_fa::CFA_FAMILY
