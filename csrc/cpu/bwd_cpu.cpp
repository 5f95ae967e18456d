// CPU backward: the reference path CI runs, with the GPU kernels' structure.
//   1. preprocess: D = rowsum(dO * O) per query row.
//   2. main pass, KV-block parallel: a workgroup owns block_n keys of one KV head, recomputes
//      P = exp(S - lse) for every query row of the G query heads of its group that sees them,
//      and accumulates dV += P^T dO, dK += dS^T Q * scale with dS = P * (dO V^T - D) * S'
//      (S' the softcap's derivative, else 1) locally, so GQA needs no atomics for dK/dV.
//   3. dQ pass, query-block parallel: recomputes dS and sums dQ += dS K * scale per row in key
//      order. The GPU takes this pass in deterministic mode only and otherwise adds dQ from the
//      main pass atomically; here both modes take it, so results are bitwise reproducible either
//      way. (Shares added from the main pass, under a lock per block of rows, saved ~30% of the
//      time but made the sums' order follow thread timing; atomically per element, they took
//      60% of it: docs/cpu_path.md.)
// Workgroups of both passes are visited through the mapping library (see bwd_params.h); packed
// batches run on ragged grids. Query rows go through the products kM at a time (cpu/block_math.h).
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include <torch/csrc/stable/library.h>

#include "cpu/block_math.h"
#include "cpu/cpu_backend.h"
#include "cpu/cpu_scores.h"
#include "cpu/isa.h"
#include "cpu/parallel.h"
#include "mapping/topology.h"
#if defined(CFA_EMULATE)
#include "ops/emulated/emulated_kernels.h"
#endif

namespace chiplet_fa {
namespace {

constexpr int kM = kCpuBlockM, kN = kCpuBlockN;

// Keys [n0, n0 + cols) of one KV head in the accumulator type: K and V transposed (the B operand
// of S = Q K^T and dP = dO V^T), and K as it is (of dQ = dS K). Zero past `cols`.
template <typename Acc, typename Isa>
struct KeyBlock {
  const int D, dim;
  std::vector<Acc> kt, vt;  // D x kN
  std::vector<Acc> k;       // kN x dim

  explicit KeyBlock(int head_dim)
      : D(head_dim), dim(round_up(head_dim, kTileCols<Acc, Isa>)), kt(size_t(D) * kN), vt(size_t(D) * kN),
        k(size_t(kN) * dim) {}

  template <typename T>
  CFA_CPU_INLINE void load(const BwdParams& p, int b, const Sequence& s, int kv_head, int n0, int cols) {
    const auto slabs = p.kv_slabs<T>(b, kv_head, s);
    if (cols < kN)
      for (std::vector<Acc>* buf : {&kt, &vt, &k}) std::fill(buf->begin(), buf->end(), Acc(0));
    stage_transposed(slabs.k + n0 * p.k_row_stride, p.k_row_stride, cols, D, Acc(1), kt.data(), kN);
    stage_transposed(slabs.v + n0 * p.v_row_stride, p.v_row_stride, cols, D, Acc(1), vt.data(), kN);
    stage_rows(slabs.k + n0 * p.k_row_stride, p.k_row_stride, cols, D, Acc(1), k.data(), dim);
  }
};

// Query rows [m0, m0 + rows) of one head in the accumulator type: q * softmax_scale (so a score is
// q_scaled . k) and dO, zero past `rows`; lse and D per row, and which rows have a gradient (a
// fully masked row, lse -inf, has none).
template <typename Acc, typename Isa>
struct QueryBlock {
  const int D, dim;
  int rows = 0;
  std::vector<Acc> q, dout;  // kM x dim
  std::array<Acc, kM> lse{}, delta{};
  std::array<bool, kM> live{};

  explicit QueryBlock(int head_dim)
      : D(head_dim), dim(round_up(head_dim, kTileCols<Acc, Isa>)), q(size_t(kM) * dim), dout(size_t(kM) * dim) {}

  template <typename T>
  CFA_CPU_INLINE void load(const BwdParams& p, int b, int h, const Sequence& s, int m0, int n) {
    const auto slabs = p.query_slabs<T>(b, h, s);
    if (n < kM) {
      std::fill(q.begin(), q.end(), Acc(0));
      std::fill(dout.begin(), dout.end(), Acc(0));
    }
    rows = n;
    stage_rows(slabs.q + m0 * p.q_row_stride, p.q_row_stride, n, D, Acc(p.softmax_scale), q.data(), dim);
    stage_rows(slabs.dout + m0 * p.do_row_stride, p.do_row_stride, n, D, Acc(1), dout.data(), dim);
    using Lse = typename LseOf<T>::type;
    const Lse* l = static_cast<const Lse*>(p.softmax_lse) + b * p.lse_batch_stride + h * p.lse_head_stride +
                   s.q_start + m0;
    const Acc* d = static_cast<const Acc*>(p.softmax_d) + p.stats_row(b, h, s) + m0;
    for (int r = 0; r < n; ++r) {
      live[r] = l[r] != -std::numeric_limits<Lse>::infinity();
      lse[r] = Acc(l[r]);
      delta[r] = d[r];
    }
  }
};

// In place of S and dP (kM x kN, the block's rows against keys [n0, n0 + cols)): P = exp(S' - lse)
// and dS = P (dP - D) S'', S' the logit and S'' its derivative (1 without softcap); 0 where a row
// does not see a key, and in rows without a gradient.
template <typename Acc, typename Isa>
CFA_CPU_INLINE void probs_and_grads(const CpuScores<Acc>& scores, const QueryBlock<Acc, Isa>& qb, int m0, int n0,
                                    int cols, Acc* s, Acc* dp) {
  const Acc neg_inf = -std::numeric_limits<Acc>::infinity();
  const bool transform = scores.softcap > 0 || scores.slope != 0;
  std::array<Acc, kN> grad;
  grad.fill(Acc(1));
  for (int r = 0; r < kM; ++r) {
    Acc* sr = s + r * kN;
    Acc* dpr = dp + r * kN;
    const int i = m0 + r;
    const bool live = r < qb.rows && qb.live[r];
    const int c_begin = live ? scores.begin(i, n0) : 0, c_end = live ? scores.end(i, n0, cols) : 0;
    if (transform)
      for (int c = c_begin; c < c_end; ++c) sr[c] = scores.logit(sr[c], i, n0 + c, &grad[c]);
    for (int c = 0; c < kN; ++c) sr[c] = ((c >= c_begin) & (c < c_end)) ? sr[c] - qb.lse[r] : neg_inf;
    exp_inplace(sr, kN);
    for (int c = 0; c < kN; ++c) dpr[c] = sr[c] * (dpr[c] - qb.delta[r]) * grad[c];
  }
}

// S and dP of a query block against a key block (kM x kN each), then P and dS in their place.
template <typename Acc, typename Isa>
CFA_CPU_INLINE void scores_and_grads(const CpuScores<Acc>& scores, const QueryBlock<Acc, Isa>& qb,
                                     const KeyBlock<Acc, Isa>& kb, int m0, int n0, int cols, Acc* s, Acc* dp) {
  const int m = round_up(qb.rows, Isa::kTileRows);
  std::fill(s, s + kM * kN, Acc(0));
  std::fill(dp, dp + kM * kN, Acc(0));
  matmul_add<Acc, Isa>(m, kN, qb.D, qb.q.data(), qb.dim, 1, kb.kt.data(), kN, s, kN);
  matmul_add<Acc, Isa>(m, kN, qb.D, qb.dout.data(), qb.dim, 1, kb.vt.data(), kN, dp, kN);
  probs_and_grads(scores, qb, m0, n0, cols, s, dp);
}

template <typename T, typename Acc>
void preprocess(const BwdParams& p) {
  const int D = p.head_dim;
  Acc* delta = static_cast<Acc*>(p.softmax_d);
  parallel_items(int64_t(p.batch) * p.num_q_heads, [&](int64_t bh) {
    const int b = int(bh / p.num_q_heads), h = int(bh % p.num_q_heads);
    const Sequence s = p.sequence(b);
    for (int i = 0; i < s.len_q; ++i) {
      const int64_t row = s.q_start + i;
      const T* o = static_cast<const T*>(p.out) + b * p.o_batch_stride + row * p.o_row_stride + h * p.o_head_stride;
      const T* d = static_cast<const T*>(p.dout) + b * p.do_batch_stride + row * p.do_row_stride + h * p.do_head_stride;
      Acc sum = 0;
      for (int x = 0; x < D; ++x) sum += Acc(o[x]) * Acc(d[x]);
      delta[p.stats_row(b, h, s) + i] = sum;
    }
  });
}

template <typename T, typename Acc>
CFA_CPU_INLINE void store_rows(const Acc* src, int ld, int rows, int D, T* dst, int64_t dst_row) {
  for (int r = 0; r < rows; ++r)
    for (int x = 0; x < D; ++x) dst[r * dst_row + x] = T(src[r * ld + x]);
}

// Main pass: dK and dV of one key block from every query row of its group's heads that sees it,
// kM rows at a time.
template <typename T, typename Acc, typename Isa>
CFA_CPU_INLINE void kv_block(const BwdParams& p, const KvTile& t) {
  const Sequence s = p.sequence(t.batch);
  const int n0 = t.n_block * p.block_n;
  const int cols = std::min(p.block_n, s.len_k - n0);
  if (cols <= 0) return;
  KeyBlock<Acc, Isa> kb(p.head_dim);
  kb.template load<T>(p, t.batch, s, t.kv_head, n0, cols);
  QueryBlock<Acc, Isa> qb(p.head_dim);
  const int dim = kb.dim;
  std::vector<Acc> sp(kM * kN), ds(kM * kN), dk(size_t(kN) * dim), dv(size_t(kN) * dim);
  const KeyWindow w = p.key_window(s);
  // Only rows whose window reaches into [n0, n0 + cols) contribute.
  const int i_begin = w.first_row(n0), i_end = w.end_row(n0 + cols);
  for (int j = 0; j < p.group_size(); ++j) {
    const int h = t.kv_head * p.group_size() + j;
    const CpuScores<Acc> scores(p, t.batch, h, s);
    for (int m0 = i_begin; m0 < i_end; m0 += kM) {
      const int rows = std::min(kM, i_end - m0);
      qb.template load<T>(p, t.batch, h, s, m0, rows);
      scores_and_grads(scores, qb, kb, m0, n0, cols, sp.data(), ds.data());
      // dV += P^T dO and dK += dS^T (q * scale), each key's terms in row order.
      matmul_add<Acc, Isa>(kN, dim, rows, sp.data(), 1, kN, qb.dout.data(), dim, dv.data(), dim);
      matmul_add<Acc, Isa>(kN, dim, rows, ds.data(), 1, kN, qb.q.data(), dim, dk.data(), dim);
    }
  }
  const auto grads = p.key_grads<T>(t.batch, t.kv_head, s);
  store_rows(dk.data(), dim, cols, p.head_dim, grads.dk + n0 * p.dk_row_stride, p.dk_row_stride);
  store_rows(dv.data(), dim, cols, p.head_dim, grads.dv + n0 * p.dv_row_stride, p.dv_row_stride);
}

// dQ of one forward tile (sequence, q_head, m_block): keys streamed in order.
template <typename T, typename Acc, typename Isa>
CFA_CPU_INLINE void dq_tile(const BwdParams& p, const Tile& t) {
  const Sequence s = p.sequence(t.batch);
  const int m0 = t.m_block * p.block_m;
  const int rows = std::min(p.block_m, s.len_q - m0);
  if (rows <= 0) return;
  const int kv_head = t.q_head / p.group_size();
  const CpuScores<Acc> scores(p, t.batch, t.q_head, s);
  QueryBlock<Acc, Isa> qb(p.head_dim);
  qb.template load<T>(p, t.batch, t.q_head, s, m0, rows);
  KeyBlock<Acc, Isa> kb(p.head_dim);
  const int dim = kb.dim;
  std::vector<Acc> sp(kM * kN), ds(kM * kN), dq(size_t(kM) * dim);
  // Keys outside every row's window are never read.
  const int n_begin = scores.window.begin(m0), n_end = scores.window.end(m0 + rows - 1);
  for (int n0 = n_begin; n0 < n_end; n0 += p.block_n) {
    const int cols = std::min(p.block_n, n_end - n0);
    kb.template load<T>(p, t.batch, s, kv_head, n0, cols);
    scores_and_grads(scores, qb, kb, m0, n0, cols, sp.data(), ds.data());
    matmul_add<Acc, Isa>(round_up(rows, Isa::kTileRows), dim, cols, ds.data(), kN, 1, kb.k.data(), dim, dq.data(),
                         dim);
  }
  const Acc scale = Acc(p.softmax_scale);
  for (int r = 0; r < rows; ++r) {
    Acc* o = static_cast<Acc*>(p.dq_accum) + p.dq_offset(t.batch, s, m0 + r, t.q_head);
    for (int x = 0; x < p.head_dim; ++x) o[x] = dq[r * dim + x] * scale;
  }
}

template <typename T, typename Acc>
void bwd_all(const BwdParams& p) {
  preprocess<T, Acc>(p);
  const GridShape kv = p.kv_grid_shape();
  parallel_items(grid_size(kv), [&](int64_t wid) {
    with_cpu_isa([&](auto isa) { kv_block<T, Acc, decltype(isa)>(p, map_kv_workgroup(p, wid)); });
  });
  const GridShape g = p.grid_shape();
  parallel_items(grid_size(g), [&](int64_t wid) {
    with_cpu_isa([&](auto isa) { dq_tile<T, Acc, decltype(isa)>(p, map_workgroup(p.mapping, wid, g)); });
  });
}

}  // namespace

BwdResult bwd_cpu(const BwdArgs& args) {
#if defined(CFA_EMULATE)
  if (emulated_bwd_takes(args.q)) return emulated_bwd(args);
#endif
  BwdTensors t;
  BwdParams p = prepare_bwd(args, kCpuBlockM, kCpuBlockN, 1, kCpuXcds, t);
  torch::stable::zero_(t.dq_accum);
  RaggedGrid q_grid(p.cu_seqlens_q, p.batch, kCpuBlockM), k_grid(p.cu_seqlens_k, p.batch, kCpuBlockN);
  p.block_offsets = q_grid.offsets();
  p.kv_block_offsets = k_grid.offsets();
  switch (dtype_of(args.q)) {
    case DType::kFloat16: bwd_all<Half, float>(p); break;
    case DType::kBFloat16: bwd_all<BFloat16, float>(p); break;
    case DType::kFloat32: bwd_all<float, float>(p); break;
    case DType::kFloat64: bwd_all<double, double>(p); break;
  }
  return {torch::stable::to(t.dq_accum, args.q.scalar_type()), t.dk, t.dv};
}

STABLE_TORCH_LIBRARY_IMPL(chiplet_fa, CPU, m) { BwdOpEntry<bwd_cpu>::register_ops(m); }

}  // namespace chiplet_fa
