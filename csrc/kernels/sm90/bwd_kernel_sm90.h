// FlashAttention-2 backward main pass for sm_90a, warp-specialised like kernels/sm90/fwd_kernel_sm90.h.
// A workgroup owns kBlockN keys (128; 64 above D = 128, kWide below) of one KV head
// (map_kv_workgroup, ACC = KV head) and produces their dK and dV; unless kDq is kSeparatePass it
// also adds every query block's dQ share.
//   producer   (warpgroup 0) copies K and V once (cp.async), then Q, dO, lse_log2 and D of each
//              query block of the group's query heads (in walk()'s order) into a ring of kStages buffers,
//              by the copy engine on one thread's instructions (TMA), guarded by mbarriers (full:
//              landed, empty: released).
//   consumers  (warpgroups 1, 2) own 64 keys each and keep dK, dV (64 x D) in registers. Per
//              query block of 64 rows, transposed so the keys are the wgmma rows:
//                S^T = K Q^T, dP^T = V dO^T        (wgmma, both operands in shared memory)
//                P^T = 2^(S^T scale log2e - lse), dS^T = P^T (dP^T - D)
//                dV += P^T dO, dK += dS^T Q        (P^T, dS^T from registers)
//              and, adding dQ, stage dS^T in shared memory, compute a 64 x 64 share of
//              dQ = dS K * scale and stage it for the copy engine, which adds it to the fp32
//              accumulator in global memory (TMA reduction: one instruction per 32 columns).
//   dQ adds  each consumer's thread 0 issues its reductions as its shares come: kAtomic in fp32;
//              kFixed (deterministic mode, BwdParams::dq_scale) in int32 units of each row, whose
//              sums come out the same in any order.
// dQ = dS K over all 128 keys (both consumers' dS^T), in 64-column panels: the consumers take a
// query block's whole share in turn (step parity), one product of N = D (at D = 128 its operands
// are 48 KB of shared memory against 64 KB for two N = 64 halves) staged panel by panel, while the
// other consumer goes on to the next block. An atomic share is computed a step late, after its
// owner's products of the next block, when the other consumer's half of dS^T has long been staged:
// an owner computing at once waited at every step for the consumer that had just computed the
// previous share (10% of the D = 128 kernel's warp samples). A one-panel product (D = 64) is
// issued while dK's product still runs; a wider one after it, in P^T and dS^T's registers.
// Above D = 128 (kWide) 64 keys of dK and dV would take 2 x D/2 registers a thread: the consumers
// share one block of 64 keys instead, consumer c holding dK, dV columns [128 c, 128 c + 128). Each
// computes S^T, dP^T for 32 of the block's 64 queries, writes its P^T and dS^T halves to shared
// memory, and after the dS^T barrier both read the whole of them for dV += P^T dO and dK += dS^T Q
// over their own columns. The dQ panels go to the consumers in turn, the odd one (D = 192) to the
// consumer with 64 columns.
#pragma once
#include <type_traits>

#include "arch/arch.h"
#include "arch/sm90_bulk.h"
#include "arch/sm90_sync.h"
#include "arch/sm90_tma.h"
#include "kernels/launch.h"
#include "kernels/bwd_params.h"
#include "kernels/scores.h"
#include "kernels/sm90/tma_params.h"
#include "kernels/sm90/trace_events.h"
#include "mapping/mapping.h"
#include "kernels/tile_io.h"
#include "kernels/tile_sizes.h"

namespace chiplet_fa::CFA_FAMILY {

// How the main pass's dQ shares reach dq_accum: not at all (a separate dQ pass), by TMA
// reductions as they come (atomic), or the same in fixed point (BwdParams::dq_scale: integer
// sums, the same in any order; deterministic mode).
enum class DqMode { kSeparatePass, kAtomic, kFixed };

// kPlain: scores without softcap or ALiBi, a kernel of its own (see kernels/sm90/fwd_kernel_sm90.h).
// Tiles and warpgroups: kernels/tile_sizes.h.
template <DType kDType, int kHeadDim, bool kWindowed, DqMode kDq, bool kPlain>
struct BwdKvKernelSm90
    : arch::WarpSpecialised<kSm90BwdWarps.consumers, kSm90BwdWarps.producer_regs, kSm90BwdWarps.consumer_regs> {
  using T = typename arch::Element<kDType>::type;
  static constexpr int kDim = arch::padded_head_dim(kHeadDim);  // shared-memory tiles: whole panels
  // The columns the products cover: at D = 96 the last panel's upper half (zero) takes no part
  // in S^T, dP^T, dV and dK (a quarter of their tensor work and of dK, dV's registers); dQ's
  // panel stays 64 columns, whose excess the reduction drops.
  static constexpr int kCols = kHeadDim;
  static_assert(kCols % 32 == 0 && kCols <= kDim, "head dims of whole 32-column halves of a panel");
  static constexpr bool kWide = kDim > 128;
  static_assert(!kWide || (kCols == kDim && kDim <= 256), "wide heads: whole panels, up to 256 columns");
  static constexpr Sm90BwdTiling kTiling = sm90_bwd_tiling(kHeadDim);
  static constexpr int kBlockN = kTiling.block_n;
  static constexpr int kBlockM = kTiling.block_m;
  static_assert(kBlockN == (kWide ? 64 : 64 * kConsumers), "a consumer's 64 keys, or (kWide) one block shared");
  static constexpr int kScoreCols = kWide ? kBlockM / kConsumers : kBlockM;  // queries of a consumer's S^T
  static constexpr int kKeyCols = kWide ? 128 : kCols;                       // dK, dV columns a consumer holds
  static constexpr int kStages = kTiling.stages;
  static_assert(geometry(kFamily).bwd_row_pad % kBlockM == 0, "query blocks read lse_log2 and D unchecked");

  using KVTile = arch::SmemTile<kBlockN, kDim>;
  using QTile = arch::SmemTile<kBlockM, kDim>;   // Q or dO of one query block
  static constexpr int kPanels = kDim / arch::kTmaBoxCols;
  // What the copy engine brings into a stage: Q, dO, lse_log2 and D of one query block.
  static constexpr uint32_t kStageBytes = 2 * QTile::kElems * sizeof(T) + 2 * kBlockM * sizeof(float);
  using DsTile = arch::SmemTile<kBlockN, kBlockM>;  // dS^T (and kWide's P^T), [key][query]: one panel
  using SAcc = arch::Acc<1, kScoreCols>;        // a warp's 16 keys x its consumer's queries
  // A thread's entries of a per-query vector of the step (lse_log2, D) at its score columns: read
  // from shared memory where used, or loaded while the step's products run, whose waits otherwise
  // put the loads' latency on its path (eight LDS.64 after each). lse_log2 so from D = 96 to 128;
  // at D = 64 only in the masked kernels, with D and a masked step's window as well (H200: -2.4%
  // there, while the unmasked D = 64 kernel lost 3-4% with all three and 5-8% with lse_log2 alone:
  // ptxas's schedule of that loop, not the loads; docs/sm90_backward.md, "Per-query columns held in
  // registers"). From D = 96, of D what fits beside s, dP^T, P^T, dK and dV across dP^T's wait
  // (kDeltaHeld); the rest is loaded at the wait, under the held part's arithmetic.
  static constexpr bool kStatsAhead = !kWide && kCols <= 64 && kWindowed;
  static constexpr bool kLseAhead = kStatsAhead || (!kWide && kCols > 64);
  // SAcc's columns come in pairs, eight apart, each pair on two rows: a float2 for four entries.
  static constexpr int kColumnPairs = SAcc::kSize / 4;
  // The first kHeld pairs in registers, loaded where the object is made; the rest read where used.
  template <int kHeld>
  struct Columns {
    float2 v[kHeld > 0 ? kHeld : 1];
    const float* src;
    int lane;
    CFA_DEVICE Columns(const float* src_, int lane_) : src(src_), lane(lane_) {
#pragma unroll
      for (int g = 0; g < kHeld; ++g) v[g] = *reinterpret_cast<const float2*>(src + SAcc::col(4 * g, lane));
    }
    CFA_DEVICE float operator()(int i) const {
      if (kHeld > 0 && i / 4 < kHeld) return i & 1 ? v[i / 4].y : v[i / 4].x;
      return src[SAcc::col(i, lane)];
    }
  };
  using LseColumns = Columns<kLseAhead ? kColumnPairs : 0>;
  // D's pairs held: all at D = 96; at D = 128 half, a quarter in the windowed kernels (more spilled
  // there), and none in the softcap/ALiBi and fixed-point dQ kernels, which at D = 128 with any of it
  // spilled or recomputed their thread index (S2R) in the step (docs/sm90_backward.md, same section).
  static constexpr int kDeltaHeld = kStatsAhead ? kColumnPairs
                                    : !kLseAhead || !kPlain || kDq == DqMode::kFixed ? 0
                                    : kCols <= 96 ? kColumnPairs : kColumnPairs / (kWindowed ? 4 : 2);
  using DeltaColumns = Columns<kDeltaHeld>;
  using KeyAcc = arch::Acc<1, kKeyCols>;        // a warp's 16 keys x its consumer's dK, dV columns
  template <int kPanelsN>
  using DqAcc = arch::Acc<1, 64 * kPanelsN>;    // a warp's 16 queries x kPanelsN dQ panels
  static constexpr bool kAddsDq = kDq != DqMode::kSeparatePass, kFixed = kDq == DqMode::kFixed;
  static constexpr int kDqHeadPanels = kDim / 64;
  // Up to D = 128 the consumers take the shares in turn, each a step late (see the top).
  static constexpr bool kDqInTurn = kAddsDq && !kWide;
  static_assert(!kDqInTurn || kConsumers == 2, "shares in turn: a consumer owns every other step's");
  static constexpr int kDqSharePanels = kDqInTurn ? kDqHeadPanels : 1;  // panels of one consumer's product
  // Panel p of step it is consumer dq_owner(p, it)'s: in turn, or (kWide) a panel a consumer.
  static CFA_DEVICE int dq_owner(int p, int it) {
    if constexpr (kWide) return (p + kDqHeadPanels) % kConsumers;
    return it % kConsumers;
  }
  // A staging slot holds one panel of a share: a consumer's share in its own slots, restaged once
  // the copy engine has read them; kWide stages each panel in a slot of its own.
  static constexpr int kDqSlots = kWide ? kDqHeadPanels : kConsumers * kDqSharePanels;
  static CFA_DEVICE int dq_slot(int p, int it) {
    if constexpr (kWide) return p;
    return dq_owner(p, it) * kDqSharePanels + p % kDqSharePanels;
  }
  // fp32 dQ staging: panels of 64 rows x 32 floats (one 128-byte swizzle row), laid out as the
  // copy engine's 128-byte swizzle reads them (16-byte chunk index XOR row % 8).
  static constexpr int kDqPanelCols = arch::kTmaBoxBytes / 4, kDqPanels = 64 / kDqPanelCols;
  static constexpr int kDqPanelElems = kBlockM * kDqPanelCols;
  static CFA_DEVICE int dq_staging_offset(int r, int c) {
    const int cc = c % kDqPanelCols;
    return (c / kDqPanelCols) * kDqPanelElems + r * kDqPanelCols + (((cc / 4) ^ (r % 8)) * 4) + cc % 4;
  }

  struct Barriers {
    uint64_t kv_full, full[kStages], empty[kStages];
  };
  // This workgroup's keys: their sequence, its key window, and the query blocks of one query
  // head that see them: [rows.first, rows.end), of which [plain.first, plain.end) see every key
  // of the block (no mask needed). Kept in shared memory and read where used: the consumers'
  // registers are all but taken by dK, dV and the scores.
  struct Keys {
    KvTile tile;
    Sequence seq;
    KeyWindow window;
    int n0;
    int h0, heads;  // the query heads [h0, h0 + heads) the tile walks (a split's, or the whole group)
    BlockRange rows, plain;
  };
  struct Smem {
    T k[KVTile::kElems];
    T v[KVTile::kElems];
    T q[kStages][QTile::kElems];
    T dout[kStages][QTile::kElems];
    T ds_t[kAddsDq || kWide ? 2 : 0][DsTile::kElems];  // alternate per step: one barrier a step suffices
    T p_t[kWide ? 2 : 0][DsTile::kElems];
    alignas(1024) float dq[kAddsDq ? kDqSlots : 0][kDqPanels * kDqPanelElems];  // TMA: 1024-byte aligned
    float lse_log2[kStages][kBlockM];
    float delta[kStages][kBlockM];
    Barriers bar;
    Keys keys;
  };
  static constexpr int kSmemBytes = int(sizeof(Smem));
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per workgroup on sm_90");
  // Named barriers (0 is __syncthreads): dS^T complete (kDqInTurn: one per dS^T buffer, the
  // other consumer's half staged for the share's owner); a dS^T buffer free again (kDqInTurn: the
  // owner's product has read it); a dQ staging buffer complete (among its consumer's threads).
  static constexpr int kDsBarrier = 1, kDsFree = 3, kDqBarrier = 5;
  static_assert(kDqBarrier + kDqSlots <= 16, "sm_90 has 16 named barriers");

  static CFA_DEVICE Keys keys_of(const BwdParams& p, const KvTile& tile) {
    Keys k;
    k.tile = tile;
    k.seq = p.sequence(tile.batch);
    k.window = p.key_window(k.seq);
    k.n0 = tile.n_block * kBlockN;
    k.heads = p.heads_per_kv_tile();
    k.h0 = tile.kv_head * p.group_size() + tile.split * k.heads;
    k.rows = query_blocks(k.window, k.n0, k.n0 + kBlockN, kBlockM);
    // Rows from first_row(last key) on see every key of the block, up to the last row whose
    // window begins at or before n0 (a last block's rows past the sequence have lse_log2 = +inf
    // and need no mask); keys past the sequence's end are always masked.
    BlockRange plain{0, 0};
    if (k.n0 + kBlockN <= k.seq.len_k) {
      const int last = k.window.end_row(k.n0 + 1);
      plain.first = kWindowed ? (k.window.first_row(k.n0 + kBlockN - 1) + kBlockM - 1) / kBlockM : 0;
      plain.end = !kWindowed || last >= k.seq.len_q ? k.rows.end : last / kBlockM;
    }
    k.plain.first = min(max(plain.first, k.rows.first), k.rows.end);
    k.plain.end = max(min(plain.end, k.rows.end), k.plain.first);
    return k;
  }

  // How many steps walk() visits: every query block of every query head of the tile's.
  static CFA_DEVICE int walk_steps(const BwdParams& p, const Keys& keys) {
    return keys.heads * (keys.rows.end - keys.rows.first);
  }

  // The (query head, query block) pairs a workgroup visits, in order, as visit(step, h, m, masked):
  // head by head from the first block. kByMask: the blocks that need the mask (outside
  // [plain.first, plain.end)) and the others in loops of their own, masked a std::bool_constant
  // (the consumers' steps); otherwise one loop, masked always true (the producer, which ignores it).
  template <bool kByMask, typename Visit>
  static CFA_DEVICE void walk(const BwdParams& p, const Keys& keys, Visit&& visit) {
    const int G = keys.heads, h0 = keys.h0;
    const BlockRange &rows = keys.rows, &plain = keys.plain;
    int it = 0;
    for (int j = 0; j < G; ++j) {
      auto blocks = [&](int first, int end, auto masked) {
        for (int m = first; m < end; ++m) visit(it++, h0 + j, m, masked);
      };
      if constexpr (!kByMask) {
        blocks(rows.first, rows.end, std::true_type{});
      } else {
        blocks(rows.first, plain.first, std::true_type{});
        blocks(plain.first, plain.end, std::false_type{});
        blocks(plain.end, rows.end, std::true_type{});
      }
    }
  }

  struct Consumer;  // warpgroups 1 and 2: kernels/sm90/bwd_consumer.h

  static CFA_DEVICE void run(const TmaBwdParams& a, unsigned char* smem_raw) {
    const BwdParams& p = a.p;
    if (blockIdx.x >= grid_size(p.kv_grid_shape())) return;  // a ragged grid is launched with a bound
    Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
    const Keys& keys = sm.keys;
    if (threadIdx.x == 0) {
      sm.keys = keys_of(p, map_kv_workgroup(p, blockIdx.x));
      trace_keys(a, kTraceWorkgroup, 0, TraceKind::kBwdBegin, sm.keys);
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
      produce(a, sm, keys);
      if (threadIdx.x == 0) trace_keys(a, kTraceWorkgroup, 1, TraceKind::kBwdProducerEnd, keys);
    } else {
      arch::claim_registers<kConsumerRegs>();
      Consumer consumer(a, sm, keys, wg - 1);
      consumer.run();
      if (threadIdx.x % kWgThreads == 0) trace_keys(a, wg - 1, 0, TraceKind::kBwdConsumerEnd, keys);
    }
  }

  // A traced build's event (kernels/trace.h): the workgroup's steps, key block, batch and split.
  static CFA_DEVICE void trace_keys(const TmaBwdParams& a, int role, int n, TraceKind kind, const Keys& keys) {
    const uint32_t block = uint32_t(keys.tile.kv_head) << 16 | uint32_t(keys.tile.n_block);
    trace_event(a.trace, role, n, kind, walk_steps(a.p, keys), block, keys.tile.batch, keys.tile.split);
  }

  static CFA_DEVICE void produce(const TmaBwdParams& a, Smem& sm, const Keys& keys) {
    const BwdParams& p = a.p;
    const int tid = threadIdx.x;
    const KvTile& tile = keys.tile;
    const auto kv = p.kv_slabs<T>(tile.batch, tile.kv_head, keys.seq);
    load_tile<KVTile, kWgThreads>(sm.k, kv.k, p.k_row_stride, keys.n0, keys.seq.len_k, p.head_dim, tid);
    load_tile<KVTile, kWgThreads>(sm.v, kv.v, p.v_row_stride, keys.n0, keys.seq.len_k, p.head_dim, tid);
    arch::mbarrier_arrive_on_copies(&sm.bar.kv_full);
    const bool packed = p.cu_seqlens_q != nullptr;
    walk<false>(p, keys, [&](int it, int h, int m, auto) {
      const int stage = it % kStages, m0 = m * kBlockM;
      const auto qs = p.query_slabs<T>(tile.batch, h, keys.seq);
      if (it >= kStages) arch::mbarrier_wait(&sm.bar.empty[stage], (it / kStages - 1) & 1);
      // The last query block of a packed sequence would bring the next sequence's rows: copied
      // by hand, zero-filled.
      if (packed && m0 + kBlockM > keys.seq.len_q) {
        load_by_hand(p, sm, qs, stage, m0, keys.seq.len_q, tid);
      } else if (tid == 0) {
        uint64_t* full = &sm.bar.full[stage];
        arch::mbarrier_arrive_expect_tx(full, kStageBytes);
        const int row = int(keys.seq.q_start) + m0, batch = packed ? 0 : tile.batch;
#pragma unroll
        for (int c = 0; c < kPanels; ++c) {
          arch::tma_load_4d(sm.q[stage] + c * QTile::kPanel, &a.q, c * arch::kTmaBoxCols, row, h, batch, full);
          arch::tma_load_4d(sm.dout[stage] + c * QTile::kPanel, &a.dout, c * arch::kTmaBoxCols, row, h, batch, full);
        }
        arch::bulk_load(sm.lse_log2[stage], qs.lse_log2 + m0, kBlockM * 4, full);
        arch::bulk_load(sm.delta[stage], qs.delta + m0, kBlockM * 4, full);
      } else {
        arch::mbarrier_arrive(&sm.bar.full[stage]);
      }
    });
    arch::copy_wait_all();  // no copy outlives the thread that issued it
  }

  // One staged dQ share (64 rows, from column col0) added to dq_accum by the copy engine.
  // Columns past the head dim and a dense batch's rows past its end lie outside dq's map.
  static CFA_DEVICE void add_dq_share(const TmaBwdParams& a, const float* sdq, int col0, int row, int h, int batch) {
#pragma unroll
    for (int c = 0; c < kDqPanels; ++c)
      arch::tma_reduce_add_4d(&a.dq, sdq + c * kDqPanelElems, col0 + c * kDqPanelCols, row, h, batch);
    arch::bulk_commit();
  }

  // One stage by cp.async from every producer thread, rows past n_rows zero-filled.
  template <typename Slabs>
  static CFA_DEVICE void load_by_hand(const BwdParams& p, Smem& sm, const Slabs& qs, int stage, int m0, int n_rows,
                                      int tid) {
    load_tile<QTile, kWgThreads>(sm.q[stage], qs.q, p.q_row_stride, m0, n_rows, p.head_dim, tid);
    load_tile<QTile, kWgThreads>(sm.dout[stage], qs.dout, p.do_row_stride, m0, n_rows, p.head_dim, tid);
    constexpr int kRowChunks = kBlockM / 4;  // 16-byte pieces of a block's lse_log2 or D
    if (tid < kRowChunks)
      arch::copy_16B_async(&sm.lse_log2[stage][4 * tid], qs.lse_log2 + m0 + 4 * tid, true);
    else if (tid < 2 * kRowChunks)
      arch::copy_16B_async(&sm.delta[stage][4 * (tid - kRowChunks)], qs.delta + m0 + 4 * (tid - kRowChunks), true);
    arch::mbarrier_arrive_on_copies(&sm.bar.full[stage]);
  }
};

}  // namespace chiplet_fa::CFA_FAMILY

#include "kernels/sm90/bwd_consumer.h"

namespace chiplet_fa::CFA_FAMILY {

template <DType kDType, int kHeadDim, bool kWindowed, DqMode kDq, bool kPlain>
CFA_GLOBAL void __launch_bounds__((BwdKvKernelSm90<kDType, kHeadDim, kWindowed, kDq, kPlain>::kThreads), 1)
    bwd_kv_kernel_sm90(const __grid_constant__ TmaBwdParams a) {
  BwdKvKernelSm90<kDType, kHeadDim, kWindowed, kDq, kPlain>::run(a, dynamic_smem());
}

}  // namespace chiplet_fa::CFA_FAMILY
