// The consumer warpgroups of the sm90 backward main pass (BwdKvKernelSm90, whose header includes
// this one at its end: the consumer reads the kernel's tiles, shared memory and walk). What a
// consumer computes per query block, and how the dQ shares go round, is at the top of
// kernels/sm90/bwd_kernel_sm90.h. One Consumer per thread, its state what the loop carries: dK, dV and
// the share a step late.
#pragma once

namespace chiplet_fa::CFA_FAMILY {

template <DType kDType, int kHeadDim, bool kWindowed, DqMode kDq, bool kPlain>
struct BwdKvKernelSm90<kDType, kHeadDim, kWindowed, kDq, kPlain>::Consumer {
  using PFrag = arch::PFrag<T, 1, kScoreCols>;
  // The functions on a step's path copy the ids and constants below into locals first: read as members
  // (through `this`), their loads and index arithmetic were redone along the step (100-200 instructions
  // more with softcap/ALiBi, spills in a windowed kernel; docs/sm90_backward.md, "Code structure and ptxas").
  const TmaBwdParams& a;
  const BwdParams& p;
  Smem& sm;
  const Keys& keys;
  const int cw, lane;
  const int warp;    // 0..7 over both consumers
  const int wg_tid;
  const int row0;    // the warp's first key in the block
  const int key0;
  const float scale;
  const int dq_row0, dq_batch;  // dq's coordinates
  const int steps;
  struct {
    int h, m0;
  } lag{0, 0};  // kDqInTurn: the previous step's query head and block, for its share
  // dv first: PTX names the accumulators in this order, which ptxas's allocation follows; this
  // order gives the plain kernels the instruction counts they had as one function.
  KeyAcc dv, dk;

  CFA_DEVICE Consumer(const TmaBwdParams& a_, Smem& sm_, const Keys& keys_, int cw_)
      : a(a_),
        p(a_.p),
        sm(sm_),
        keys(keys_),
        cw(cw_),
        lane(threadIdx.x % 32),
        warp(threadIdx.x / 32 - kWgThreads / 32),
        wg_tid(threadIdx.x % kWgThreads),
        row0((kWide ? warp % 4 : warp) * 16),
        key0(keys_.n0 + row0),
        scale(float(a_.p.softmax_scale)),
        dq_row0(int(keys_.seq.q_start)),
        dq_batch(a_.p.cu_seqlens_q ? 0 : keys_.tile.batch),
        steps(walk_steps(a_.p, keys_)) {
#pragma unroll
    for (int i = 0; i < KeyAcc::kSize; ++i) dk.x[i] = dv.x[i] = 0.f;
  }

  CFA_DEVICE void run() {
    if (steps > 0) {
      arch::mbarrier_wait(&sm.bar.kv_full, 0);
      // Plain scores do not depend on the head: softmax_scale (a double) converted once, not on
      // every step's path to its first product (a DSETP, 3.6% of the D = 128 kernel's samples).
      const ScoreMod plain(p, keys.tile.batch, 0, keys.seq);
      walk<true>(p, keys, [&](int it, int h, int m, auto masked) {
        if constexpr (kPlain) step(it, h, m * kBlockM, plain, masked);
        else step(it, h, m * kBlockM, ScoreMod(p, keys.tile.batch, h, keys.seq), masked);
      });
      if constexpr (kDqInTurn)
        if (dq_owner(0, steps - 1) == cw)
          lagged_share(steps - 1, lag.h, lag.m0, arch::opaque(lane), std::integral_constant<int, kDqSharePanels>{});
    }
    if constexpr (kAddsDq) arch::bulk_wait_all();
    store_key_grads();
  }

  // P^T of one block (queries from m0), packed for dV += P^T dO; s keeps P^T times the logit's
  // derivative (1 without a softcap), which dS^T needs. Masked is a compile-time variant, like
  // kPlain: the common case stays one FFMA and one exp2 per score.
  // window: the sequence's (its len_k is the sequence's), read where the caller chose.
  template <typename Masked>
  CFA_DEVICE void probabilities(SAcc& s, PFrag& pf, const LseColumns& lse_log2, const KeyWindow& window, int m0,
                                const ScoreMod& mod, Masked) const {
    const int lane = this->lane, key0 = this->key0;
    auto hidden = [&](int i) {
      const int key = key0 + SAcc::row(i, lane), row = m0 + SAcc::col(i, lane);
      return Masked::value && (kWindowed ? !window.visible(row, key) : key >= window.len_k);
    };
    if constexpr (kPlain) {
#pragma unroll
      for (int i = 0; i < SAcc::kSize; ++i) {
        const float prob = arch::fast_exp2(s.x[i] * mod.scale_log2 - lse_log2(i));
        s.x[i] = hidden(i) ? 0.f : prob;
      }
      arch::pack_p(pf, s);
    } else {
#pragma unroll
      for (int i = 0; i < SAcc::kSize; i += 2) {
        float prob[2], grad[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int qi = SAcc::col(i + e, lane);
          const float logit = mod.logit(s.x[i + e], m0 + qi, key0 + SAcc::row(i + e, lane), &grad[e]);
          prob[e] = hidden(i + e) ? 0.f : arch::fast_exp2(logit - lse_log2(i + e));
        }
        arch::pack_p_pair(pf, i, prob[0], prob[1]);
        s.x[i] = prob[0] * grad[0];
        s.x[i + 1] = prob[1] * grad[1];
      }
    }
  }

  // dS^T = P^T (dP^T - D), packed.
  static CFA_DEVICE void score_grads(const SAcc& s, SAcc& dp, PFrag& dsf, const DeltaColumns& delta) {
#pragma unroll
    for (int i = 0; i < SAcc::kSize; ++i) dp.x[i] = s.x[i] * (dp.x[i] - delta(i));
    arch::pack_p(dsf, dp);
  }

  // Panels [panel0, panel0 + kPanelsN) of step it's dQ share, this consumer's: dS K over every
  // key, staged in shared memory and added by the consumer's thread 0.
  template <int kPanelsN>
  CFA_DEVICE void dq_share(int it, int h, int m0, const T* ds_t, int panel0, int l,
                           std::integral_constant<int, kPanelsN>) const {
    const float scale = this->scale;
    const int warp = this->warp;
    using Acc = DqAcc<kPanelsN>;
    Acc dq;
    arch::wgmma_fence();
    arch::wgmma_tn<T, kBlockN, kBlockN, kBlockN>(dq, ds_t, sm.k + panel0 * KVTile::kPanel);
    arch::wgmma_commit();
    // kFixed: the units of this thread's two rows (Acc slots 0 and 1), loaded under the product.
    [[maybe_unused]] float units[2] = {scale, scale};
    if constexpr (kFixed) {
      const float* row_scale = p.dq_scale + p.stats_row(keys.tile.batch, h, keys.seq) + m0 + (warp % 4) * 16 + l / 4;
      units[0] = row_scale[0] * scale;
      units[1] = row_scale[8] * scale;
    }
    arch::wgmma_wait<0>();
    arch::pin(dq.x);
    // kDqInTurn: dS^T is read; the other consumer may restage that buffer two steps on.
    if (kDqInTurn && it + 2 < steps) arch::named_barrier_arrive(kDsFree + it % 2, kConsumers * kWgThreads);
    stage_dq(dq, it, m0, panel0, l, units);
    arch::fence_async_proxy();
    arch::named_barrier_sync(kDqBarrier + dq_slot(panel0, it), kWgThreads);
    if (wg_tid == 0)
      for (int panel = panel0; panel < panel0 + kPanelsN; ++panel)
        add_dq_share(a, sm.dq[dq_slot(panel, it)], 64 * panel, dq_row0 + m0, h, dq_batch);
  }

  // A dQ share into its staging slots, scaled (kFixed: to the rows' integer units).
  template <typename Acc>
  CFA_DEVICE void stage_dq(const Acc& dq, int it, int m0, int panel0, int l, const float (&units)[2]) const {
    const float scale = this->scale;
    const int warp = this->warp;
    // A float2 store is served a half-warp (4 rows) at a time, and the swizzle gives rows 2k and
    // 2k + 1 the same two chunks (Nsight Compute: two wavefronts over the ideal per store). So
    // odd rows store the column group two on (element i ^ 8, column ^ 16) in the same
    // instruction: a half-warp's rows then cover all 32 banks, for a select per value.
    const bool odd_row = l & 4;
    auto staged = [&](int i) {
      const int r = (warp % 4) * 16 + Acc::row(i, l), c = Acc::col(i, l) ^ (odd_row ? 16 : 0);
      return sm.dq[dq_slot(panel0 + c / 64, it)] + dq_staging_offset(r, c % 64);
    };
#pragma unroll
    for (int i = 0; i < Acc::kSize; i += 2) {
      const float x0 = odd_row ? dq.x[i ^ 8] : dq.x[i], x1 = odd_row ? dq.x[(i ^ 8) + 1] : dq.x[i + 1];
      if constexpr (kFixed) {
        const float unit = units[Acc::slot(i)];
        *reinterpret_cast<int2*>(staged(i)) = make_int2(__float2int_rn(x0 * unit), __float2int_rn(x1 * unit));
      } else {
        *reinterpret_cast<float2*>(staged(i)) = make_float2(x0 * scale, x1 * scale);
      }
    }
    // Rows past the sequence's end: a dense batch's lie outside dq's map (the copy engine drops
    // them), but a packed batch's are the next sequence's, and past the end dS may be 0 * NaN
    // (this sequence's K or V non-finite): there they are overwritten with zeros, so the common
    // case stores each value without a select (64 FSEL a share at D = 128).
    const int rows_left = int(keys.seq.len_q) - m0;
    if (p.cu_seqlens_q && rows_left < kBlockM) {
#pragma unroll
      for (int i = 0; i < Acc::kSize; i += 2)
        if ((warp % 4) * 16 + Acc::row(i, l) >= rows_left) *reinterpret_cast<int2*>(staged(i)) = make_int2(0, 0);
    }
  }

  // kDqInTurn: share j, this consumer's, a step late: the other consumer's half of its dS^T is
  // staged (usually long since), and the copy engine has read this consumer's previous share.
  template <typename PanelsN>
  CFA_DEVICE void lagged_share(int j, int h, int m0, int l, PanelsN panels_n) const {
    if (wg_tid == 0) arch::bulk_wait_read<0>();
    arch::named_barrier_sync(kDsBarrier + j % 2, kConsumers * kWgThreads);
    dq_share(j, h, m0, sm.ds_t[j % 2], 0, l, panels_n);
  }

  // dS^T (and kWide's P^T) staged: once both consumers have theirs there, dQ may read them.
  CFA_DEVICE void staged_barrier() const {
    arch::fence_async_proxy();
    // Before this consumer restages dQ, the copy engine must have read its previous shares.
    if (kAddsDq && wg_tid == 0) arch::bulk_wait_read<0>();
    arch::named_barrier_sync(kDsBarrier, kConsumers * kWgThreads);
  }

  // Every thread releases the stage: an arrival orders only its own thread's reads (here
  // lse_log2 and D; wgmma_wait covered the tensor cores' reads of Q and dO).
  CFA_DEVICE void release(int stage) {
    arch::pin(dk.x);
    arch::pin(dv.x);
    arch::mbarrier_arrive(&sm.bar.empty[stage]);
  }

  template <typename Masked>
  CFA_DEVICE void step(int it, int h, int m0, const ScoreMod& mod, Masked masked) {
    const int stage = it % kStages;
    arch::mbarrier_wait(&sm.bar.full[stage], (it / kStages) & 1);
    arch::fence_async_proxy();  // a packed sequence's last block came by cp.async (generic proxy)
    // The descriptors from a warp-uniform cw each step, so they live in uniform registers (held
    // across the loop, they spill); the staging addresses from an opaque lane, likewise.
    const int wcw = arch::warp_uniform(cw), l = arch::opaque(lane);
    if constexpr (kWide) wide_step(it, stage, h, m0, mod, masked, wcw, l);
    else narrow_step(it, stage, h, m0, mod, masked, wcw, l);
  }

  // Up to D = 128: this consumer's 64 keys against the block's 64 queries.
  template <typename Masked>
  CFA_DEVICE void narrow_step(int it, int stage, int h, int m0, const ScoreMod& mod, Masked masked, int wcw, int l) {
    const int lane = this->lane, row0 = this->row0;
    const T* sQ = sm.q[stage];
    const T* sdO = sm.dout[stage];
    // A masked step's window likewise (read after S^T's wait, an LDS.128 on the step's path).
    [[maybe_unused]] KeyWindow window_ahead;
    if constexpr (kStatsAhead && Masked::value) window_ahead = keys.window;
    const KeyWindow& window = kStatsAhead ? window_ahead : keys.window;
    SAcc s, dp;
    PFrag pf, dsf;
    arch::wgmma_fence();
    arch::wgmma_qk<T, kBlockM, kCols, kBlockN>(s, sm.k, sQ, wcw);
    arch::wgmma_commit();
    arch::wgmma_qk<T, kBlockM, kCols, kBlockN>(dp, sm.v, sdO, wcw);
    arch::wgmma_commit();
    const LseColumns lse_log2(sm.lse_log2[stage], lane);
    const DeltaColumns delta(sm.delta[stage], lane);
    arch::wgmma_wait<1>();
    arch::pin(s.x);
    probabilities(s, pf, lse_log2, window, m0, mod, masked);
    arch::wgmma_fence();
    arch::wgmma_pv<T, kBlockM, kCols>(dv, pf, sdO);
    arch::wgmma_commit();
    arch::wgmma_wait<1>();  // dP^T (dV += P^T dO may still run)
    arch::pin(dp.x);
    score_grads(s, dp, dsf, delta);
    arch::wgmma_fence();
    arch::wgmma_pv<T, kBlockM, kCols>(dk, dsf, sQ);
    arch::wgmma_commit();
    // kDqInTurn: the other consumer owns this step's share and this one the previous step's.
    [[maybe_unused]] const bool lags = kDqInTurn && dq_owner(0, it) != wcw;
    if constexpr (kDqInTurn) {
      // The buffer's dS^T from two steps back has been read by its owner, the other consumer.
      if (lags && it >= 2) arch::named_barrier_sync(kDsFree + it % 2, kConsumers * kWgThreads);
      stage_t(sm.ds_t[it % 2], dsf, row0, 0, l);
      arch::fence_async_proxy();
      if (lags) arch::named_barrier_arrive(kDsBarrier + it % 2, kConsumers * kWgThreads);
      // One panel's accumulator fits beside the pending dK product: issued while it runs.
      if constexpr (kDqSharePanels == 1)
        if (lags && it > 0) lagged_share(it - 1, lag.h, lag.m0, l, std::integral_constant<int, 1>{});
    }
    arch::wgmma_wait<0>();  // dK += dS^T Q; P^T and dS^T's registers go to dQ's accumulator
    arch::pin(pf.a);
    arch::pin(dsf.a);
    release(stage);  // dQ reads only dS^T and K
    if constexpr (kDqInTurn && kDqSharePanels > 1)
      if (lags && it > 0) lagged_share(it - 1, lag.h, lag.m0, l, std::integral_constant<int, kDqSharePanels>{});
    lag = {h, m0};
  }

  // Above D = 128: the products, then Q, dO, lse_log2 and D are read and the next block loads
  // under dQ (D = 256 has one stage).
  template <typename Masked>
  CFA_DEVICE void wide_step(int it, int stage, int h, int m0, const ScoreMod& mod, Masked masked, int wcw, int l) {
    wide_products(it, stage, m0, mod, masked, wcw, l);
    arch::wgmma_wait<0>();
    release(stage);
    if constexpr (kAddsDq)
#pragma unroll
      for (int panel = 0; panel < kDqHeadPanels; ++panel)
        if (dq_owner(panel, it) == wcw) dq_share(it, h, m0, sm.ds_t[it % 2], panel, l, std::integral_constant<int, 1>{});
  }

  // kWide: S^T, dP^T of this consumer's queries; P^T and dS^T staged for both consumers; then
  // dV += P^T dO and dK += dS^T Q over this consumer's columns, all operands in shared memory.
  template <typename Masked>
  CFA_DEVICE void wide_products(int it, int stage, int m0, const ScoreMod& mod, Masked masked, int wcw, int l) {
    const int lane = this->lane, row0 = this->row0;
    const T* sQ = sm.q[stage];
    const T* sdO = sm.dout[stage];
    const int q0 = wcw * kScoreCols;
    SAcc s, dp;
    arch::wgmma_fence();
    arch::wgmma_qk<T, kScoreCols, kCols, kBlockN, kBlockM>(s, sm.k, sQ + q0 * 64, 0);
    arch::wgmma_commit();
    arch::wgmma_qk<T, kScoreCols, kCols, kBlockN, kBlockM>(dp, sm.v, sdO + q0 * 64, 0);
    arch::wgmma_commit();
    arch::wgmma_wait<1>();
    arch::pin(s.x);
    PFrag pf, dsf;
    probabilities(s, pf, LseColumns(sm.lse_log2[stage] + q0, lane), keys.window, m0 + q0, mod, masked);
    arch::wgmma_wait<0>();
    arch::pin(dp.x);
    score_grads(s, dp, dsf, DeltaColumns(sm.delta[stage] + q0, lane));
    stage_t(sm.p_t[it % 2], pf, row0, q0, l);
    stage_t(sm.ds_t[it % 2], dsf, row0, q0, l);
    staged_barrier();
    // Consumer 1's columns from panel 2 on: 128 of them, or 64 at D = 192.
    auto key_products = [&](auto cols) {
      arch::wgmma_pv_ss<T, decltype(cols)::value, kBlockM>(dv, sm.p_t[it % 2], sdO + 2 * wcw * QTile::kPanel);
      arch::wgmma_pv_ss<T, decltype(cols)::value, kBlockM>(dk, sm.ds_t[it % 2], sQ + 2 * wcw * QTile::kPanel);
    };
    arch::wgmma_fence();
    // One path where both consumers have 128 columns: where two paths meet with the accumulators
    // in flight, ptxas adds a warpgroup.arrive before the products (C7519).
    if (kCols == 2 * kKeyCols || wcw == 0) key_products(std::integral_constant<int, kKeyCols>{});
    else key_products(std::integral_constant<int, kCols - kKeyCols>{});
    arch::wgmma_commit();
  }

  // A consumer's packed P^T or dS^T (its warp's 16 keys from row0, its queries from column q0)
  // into a [key][query] tile: fragment word j of k-step kk holds the pair at index kk * 8 + 2j.
  static CFA_DEVICE void stage_t(T* tile, const PFrag& f, int row0, int q0, int l) {
#pragma unroll
    for (int kk = 0; kk < kScoreCols / 16; ++kk)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int i = kk * 8 + 2 * j;
        const int offset = DsTile::offset(row0 + SAcc::row(i, l), q0 + SAcc::col(i, l));
        *reinterpret_cast<uint32_t*>(tile + offset) = f.a[0][kk][j];
      }
  }

  // dK, dV: kWide's consumer c holds columns [128 c, ...), 128 of them or D - 128. A split
  // group's partials are added into the fp32 accumulators dk, dv point at, or in deterministic
  // mode (kFixed) written to the split's own fp32 slice there (BwdParams::kv_partial_stride).
  CFA_DEVICE void store_key_grads() const {
    const int lane = this->lane, key0 = this->key0, cw = this->cw;
    const float scale = this->scale;
    const KvTile& tile = keys.tile;
    const auto kv = p.key_grads<T>(tile.batch, tile.kv_head, keys.seq);
    const auto acc = p.key_grads<float>(tile.batch, tile.kv_head, keys.seq);
    const bool partial = p.kv_split > 1;
    const int64_t slice = kFixed && partial ? keys.tile.split * p.kv_partial_stride : 0;
    float* const dk_slice = acc.dk + slice;
    float* const dv_slice = acc.dv + slice;
    const int col0 = kWide ? kKeyCols * cw : 0, cols = kWide && cw == 1 ? kCols - kKeyCols : kKeyCols;
#pragma unroll
    for (int i = 0; i < KeyAcc::kSize; i += 2) {
      const int key = key0 + KeyAcc::row(i, lane), c = KeyAcc::col(i, lane), col = col0 + c;
      if (key < keys.seq.len_k && c < cols && col < p.head_dim) {  // head_dim is even: the pair is in or out
        const int64_t k_off = key * p.dk_row_stride + col, v_off = key * p.dv_row_stride + col;
        if (partial && kFixed) {  // deterministic: the split's own slice, summed by the binding
          *reinterpret_cast<float2*>(dk_slice + k_off) = make_float2(dk.x[i] * scale, dk.x[i + 1] * scale);
          *reinterpret_cast<float2*>(dv_slice + v_off) = make_float2(dv.x[i], dv.x[i + 1]);
        } else if (partial) {
          arch::red_add_v2(acc.dk + k_off, dk.x[i] * scale, dk.x[i + 1] * scale);
          arch::red_add_v2(acc.dv + v_off, dv.x[i], dv.x[i + 1]);
        } else {
          *reinterpret_cast<uint32_t*>(kv.dk + k_off) = arch::pack2<T>(dk.x[i] * scale, dk.x[i + 1] * scale);
          *reinterpret_cast<uint32_t*>(kv.dv + v_off) = arch::pack2<T>(dv.x[i], dv.x[i + 1]);
        }
      }
    }
  }
};

}  // namespace chiplet_fa::CFA_FAMILY
