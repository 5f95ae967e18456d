// The consumer warpgroups of the sm90 forward (FwdKernelSm90, whose header includes this one at its
// end: a consumer reads the kernel's tiles, ring and tile slots). What a consumer does per step,
// and how the turns go round, is at the top of kernels/sm90/fwd_kernel_sm90.h.
#pragma once

namespace chiplet_fa::CFA_FAMILY {

template <DType kDType, int kHeadDim, bool kWindowed, bool kPlain>
struct FwdKernelSm90<kDType, kHeadDim, kWindowed, kPlain>::Consumer {
  // The consumers' turns run on from tile to tile, in a ring: consumer 0 takes the first step, each
  // step hands the turn to the next consumer, and consumer 0 takes the turn the last one hands
  // over before it stops. So one consumer starts the next tile while the others finish the last one.
  // A traced build records each tile's start and end (kernels/trace.h).
  static CFA_DEVICE void consume(const FwdParams& p, const TraceSink& trace, const Slabs& t, int cw) {
    if (cw == kConsumers - 1) arch::named_barrier_arrive(kTurnBarrier, kTurnThreads);
    for (int n = 0, ring = 0;; ++n) {
      const uint32_t q0 = trace_clock();
      arch::mbarrier_wait(&t.bar->q_full[n % kQStages], q_phase_of(n));
      const uint32_t q_wait = trace_clock() - q0;
      const TileInfo& info = t.info[n % kInfoSlots];
      if (info.none) break;
      const bool tracer = threadIdx.x % kWgThreads == 0;
      const uint32_t where = uint32_t(info.tile.q_head) << 16 | uint32_t(info.tile.m_block);
      if (tracer) trace_event(trace, cw, 2 * n, TraceKind::kFwdTileBegin, info.tile.batch, where, info.n_blocks(), q_wait);
      const uint32_t c0 = trace_clock();
      const KWaits k_wait = consume_tile(p, t, info, cw, arch::warp_uniform(ring), n % kQStages);
      if (tracer)
        trace_event(trace, cw, 2 * n + 1, TraceKind::kFwdTileEnd, trace_clock() - c0, k_wait.first, info.n_blocks(),
                    k_wait.rest);
      ring += info.n_blocks();
    }
    if (cw == 0) arch::named_barrier_sync(kTurnBarrier, kTurnThreads);
  }

  // Cycles a consumer's steps waited for K: the tile's first block (it comes with the tile's Q) and
  // the others. A traced build's; 0 otherwise.
  struct KWaits {
    uint32_t first = 0, rest = 0;
  };
  static CFA_DEVICE KWaits consume_tile(const FwdParams& p, const Slabs& t, const TileInfo& info, int cw, int ring0,
                                          int qs) {
    const T* sQ = t.sQ + qs * QTile::kElems;
    const ScoreMod mod(p, info.tile.batch, info.tile.q_head, info.seq);
    const int lane = threadIdx.x % 32;
    const int warp = threadIdx.x / 32 - kWgThreads / 32;  // over all consumers
    const int warp_row0 = info.m0 + warp * 16;
    const int n_blocks = info.n_blocks();  // read here, not in take_turns: that moved ptxas's schedule
    // (1 - cw for two: the compiler does not know cw < 2, and a modulo costs the step two instructions)
    const int next = kConsumers == 2 ? 1 - cw : (cw + 1) % kConsumers;
    const int turn = kTurnBarrier + cw, next_turn = kTurnBarrier + next;

    OAcc o;
#pragma unroll
    for (int i = 0; i < OAcc::kSize; ++i) o.x[i] = 0.f;
    SAcc s;
    arch::PFrag<T, 1, kBlockN> pf;
    Softmax softmax;

    // Step j issues QK^T of key block keys.first + j (ring position ring0 + j: cur) and PV of
    // block j - 1 (prev). The first and last steps, and the blocks that need masking, are separate
    // instantiations: ptxas serialises a wgmma under a runtime branch, and if-converts a masking
    // branch into selects on every block.
    RingSlot cur{stage_of(ring0), phase_of(ring0)}, prev = cur;
    KWaits k_wait;
    auto step = [&](int j, auto has_qk, auto has_pv, auto masked) {
      constexpr bool kQK = decltype(has_qk)::value, kPV = decltype(has_pv)::value;
      const int stage = cur.stage;
      if constexpr (kQK) {
        const uint32_t k0 = trace_clock();
        arch::mbarrier_wait(&t.bar->k_full[stage], cur.phase);
        (kPV ? k_wait.rest : k_wait.first) += trace_clock() - k0;  // only the first step has no PV
      }
      if constexpr (kPV) arch::mbarrier_wait(&t.bar->v_full[prev.stage], prev.phase);
      // The block's first key and (masked) the window from the tile's slot in shared memory before
      // the products: read after QK^T's wait, their loads' latency was on the step's path.
      const int n0 = (info.keys.first + j) * kBlockN;
      [[maybe_unused]] KeyWindow window;
      if constexpr (decltype(masked)::value) window = info.window;
      arch::named_barrier_sync(turn, kTurnThreads);
      arch::wgmma_fence();
      // QK^T first, in a group of its own: the softmax starts when it completes, while PV of
      // the previous block still runs (FA3's intra-warpgroup overlap, with no second S in
      // registers: P of the previous block stays packed until PV is done with it).
      if constexpr (kQK) {
        arch::wgmma_qk<T, kBlockN, kCols, kBlockM>(s, sQ, t.sK + stage * KVTile::kElems, cw);
        arch::wgmma_commit();
      }
      if constexpr (kPV) {
        arch::wgmma_pv<T, kBlockN, kCols>(o, pf, t.sV + prev.stage * KVTile::kElems);
        arch::wgmma_commit();
      }
      arch::named_barrier_arrive(next_turn, kTurnThreads);
      typename Softmax::Rescale rescale{false, {}};
      if constexpr (kQK) {
        arch::wgmma_wait<kPV ? 1 : 0>();
        arch::pin(s.x);
        // wgmma_wait is warp-collective: the whole warp is done with the buffer.
        if (lane == 0) arch::mbarrier_arrive(&t.bar->k_empty[stage]);
        mod.to_logits<kPlain>(s, warp_row0, n0, lane);
        if constexpr (decltype(masked)::value) softmax.mask(s, window, n0, warp_row0, lane);
        rescale = softmax.fold(s, mod.exp_scale<kPlain>());
      }
      if constexpr (kPV) {
        arch::wgmma_wait<0>();
        arch::pin(o.x);
        arch::pin(pf.a);
        if (lane == 0) arch::mbarrier_arrive(&t.bar->v_empty[prev.stage]);
      }
      if constexpr (kQK) {
        Softmax::rescale(o, rescale);
        arch::pack_p(pf, s);
        prev = cur;
        cur.next();
      }
    };
    auto idle = [&](bool has_block) { idle_turn(t, cur, turn, next_turn, lane, has_block); };
    take_turns(t, info, n_blocks, cw, qs, step, idle);

    if constexpr (kSplits) {
      if (info.piece_slot >= 0 && !merge_pieces(p.split, info, o, softmax, warp, lane)) return k_wait;
    }
    float inv_sum[Softmax::kSlots];
    softmax.finish(inv_sum, info.g.lse, info.seq.len_q, warp_row0, lane);
    store_output(info.g.out, p.o_row_stride, o, inv_sum, warp_row0, info.seq.len_q, p.head_dim, lane);
    return k_wait;
  }

  // The tile's n_blocks + 1 turns of one consumer, each a step (its own blocks) or an idle turn.
  // Blocks [plain_lo, plain_hi) of the tile are ones no row of this consumer masks, [mine.first,
  // mine.end) those some row of it sees.
  template <class Step, class Idle>
  static CFA_DEVICE void take_turns(const Slabs& t, const TileInfo& info, int n_blocks, int cw, int qs, Step& step,
                                    Idle& idle) {
    if (n_blocks > 0) {
      const BlockRange plain = unmasked_blocks(info, cw), mine = consumer_blocks(info, cw);
      const int plain_lo = min(n_blocks, max(0, plain.first - info.keys.first));
      const int plain_hi = max(plain_lo, min(n_blocks, plain.end - info.keys.first));
      using yes = std::true_type;
      using no = std::false_type;
      for (int j = 0; j < mine.first; ++j) idle(true);
      if (mine.first < mine.end) {
        const int f = mine.first;
        if (f >= plain_lo && f < plain_hi)
          step(f, yes{}, no{}, no{});
        else
          step(f, yes{}, no{}, yes{});
        int j = f + 1;
        for (; j < min(plain_lo, mine.end); ++j) step(j, yes{}, yes{}, yes{});
        for (; j < min(plain_hi, mine.end); ++j) step(j, yes{}, yes{}, no{});
        for (; j < mine.end; ++j) step(j, yes{}, yes{}, yes{});
        arch::mbarrier_arrive(&t.bar->q_empty[qs]);  // every QK^T of the tile is complete
        step(mine.end, no{}, yes{}, no{});
      } else {
        arch::mbarrier_arrive(&t.bar->q_empty[qs]);
        idle(false);
      }
      for (int j = mine.end; j < n_blocks; ++j) idle(true);
    } else {
      arch::mbarrier_arrive(&t.bar->q_empty[qs]);
    }
  }

  // A block none of this consumer's rows sees: it keeps its turn in the ring and releases the
  // buffers once they are full (an earlier arrival would count towards their previous use).
  static CFA_DEVICE void idle_turn(const Slabs& t, RingSlot& cur, int turn, int next_turn, int lane, bool has_block) {
    arch::named_barrier_sync(turn, kTurnThreads);
    arch::named_barrier_arrive(next_turn, kTurnThreads);
    if (!has_block) return;
    arch::mbarrier_wait(&t.bar->k_full[cur.stage], cur.phase);
    if (lane == 0) arch::mbarrier_arrive(&t.bar->k_empty[cur.stage]);
    arch::mbarrier_wait(&t.bar->v_full[cur.stage], cur.phase);
    if (lane == 0) arch::mbarrier_arrive(&t.bar->v_empty[cur.stage]);
    cur.next();
  }

  // A piece of a split tile leaves its warp's rows (O, row maxima and sums, unnormalised) in its
  // slot. The warp whose count then completes the tile merges the tile's slots in their order into
  // o and softmax (so the bits do not depend on which piece came last) and returns true: the caller
  // writes O and the LSE. The count follows the slot's stores, and the slots' loads the count.
  static CFA_DEVICE bool merge_pieces(const FwdTailSplit& split, const TileInfo& info, OAcc& o, Softmax& softmax,
                                      int warp, int lane) {
    const int thread = warp * 32 + lane;
    float4* mine = reinterpret_cast<float4*>(split.partials + int64_t(info.piece_slot) * kSlotFloats);
#pragma unroll
    for (int c = 0; c < OAcc::kSize / 4; ++c)
      mine[c * kConsumerThreads + thread] = make_float4(o.x[4 * c], o.x[4 * c + 1], o.x[4 * c + 2], o.x[4 * c + 3]);
    mine[OAcc::kSize / 4 * kConsumerThreads + thread] =
        make_float4(softmax.row_max[0], softmax.row_max[1], softmax.row_sum[0], softmax.row_sum[1]);
    __threadfence();
    __syncwarp();
    int last = 0;
    if (lane == 0) {
      const int n = info.n_blocks();
      last = atomicAdd(split.done + info.tail_tile * kConsumerWarps + warp, n) + n == split.tile_blocks;
    }
    if (!arch::warp_uniform(last)) return false;
    __threadfence();
    softmax = Softmax();
#pragma unroll
    for (int i = 0; i < OAcc::kSize; ++i) o.x[i] = 0.f;
    const TileSlots slots = tile_slots(split, info.tail_tile);
    for (int k = 0; k < slots.count(); ++k)
      merge_piece(reinterpret_cast<const float4*>(split.partials + int64_t(slots.slot(k)) * kSlotFloats), thread, o,
                  softmax);
    return true;
  }
  // Folds one piece's rows into o and softmax, both taken to the larger of the two row maxima.
  static CFA_DEVICE void merge_piece(const float4* slot, int thread, OAcc& o, Softmax& softmax) {
    const float4 stats = __ldcg(slot + OAcc::kSize / 4 * kConsumerThreads + thread);
    const float piece_max[2] = {stats.x, stats.y}, piece_sum[2] = {stats.z, stats.w};
    float mine[2], theirs[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m = fmaxf(softmax.row_max[r], piece_max[r]);
      mine[r] = softmax.row_max[r] == -INFINITY ? 0.f : arch::fast_exp2(softmax.row_max[r] - m);
      theirs[r] = piece_max[r] == -INFINITY ? 0.f : arch::fast_exp2(piece_max[r] - m);
      softmax.row_max[r] = m;
      softmax.row_sum[r] = mine[r] * softmax.row_sum[r] + theirs[r] * piece_sum[r];
    }
#pragma unroll
    for (int c = 0; c < OAcc::kSize / 4; ++c) {
      const float4 v = __ldcg(slot + c * kConsumerThreads + thread);
      const float x[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int r = OAcc::slot(4 * c + j);
        o.x[4 * c + j] = mine[r] * o.x[4 * c + j] + theirs[r] * x[j];
      }
    }
  }

  // The tile's key blocks (from its first, [first, end)) that some row of consumer cw sees; the consumer
  // idles through the others. Taken with three consumers under a mask, where a 192-row tile's diagonal
  // spans a block its first 64 rows never see (+2-3% at B=8 H=16 N=2K D=64 causal). With two, each sees
  // every block of a causal 128-row tile, and the idle path compiled in cost the D = 128 causal kernels
  // 2-3% (docs/sm90_forward.md, "Three consumers and idle turns"): they keep the plain sequence of steps.
  static CFA_DEVICE BlockRange consumer_blocks(const TileInfo& info, int cw) {
    const int n = info.n_blocks();
    if constexpr (!kWindowed || kConsumers == 2) return BlockRange{0, n};
    const int r0 = info.m0 + 64 * cw, r1 = min(r0 + 64, info.seq.len_q) - 1;
    if (r0 > r1) return BlockRange{0, 0};  // rows past the sequence
    const BlockRange k = key_blocks(info.window, r0, r1, kBlockN);
    const int first = min(n, max(0, k.first - info.keys.first));
    return BlockRange{first, max(first, min(n, k.end - info.keys.first))};
  }

  // Key blocks every row of consumer cw sees whole (no mask needed): after its last row's window
  // begins, before its first row's ends, inside the sequence. With three consumers a 192-row
  // tile's diagonal spans two or three blocks, and rows further down see more of them whole: taken
  // per consumer, 32 of a causal N = 2K head's 272 consumer steps are masked instead of 47. With
  // two, a consumer's range is the tile's (128-row tiles on 128-key blocks).
  static CFA_DEVICE BlockRange unmasked_blocks(const TileInfo& info, int cw) {
    if constexpr (!kWindowed) return BlockRange{0, info.seq.len_k / kBlockN};
    const int first_row = kConsumers == 2 ? info.m0 : info.m0 + 64 * cw;
    const int last_row = min(first_row + (kConsumers == 2 ? kBlockM : 64), info.seq.len_q) - 1;
    return BlockRange{(info.window.begin(last_row) + kBlockN - 1) / kBlockN, info.window.end(first_row) / kBlockN};
  }
};

}  // namespace chiplet_fa::CFA_FAMILY
