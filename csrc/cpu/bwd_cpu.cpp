// CPU backward: the reference path CI runs, with the GPU kernels' structure.
//   1. preprocess: D = rowsum(dO * O) per query row.
//   2. main pass, KV-block parallel: a workgroup owns block_n keys of one KV head, recomputes
//      P = exp(S - lse) for every query row of the G query heads of its group that sees them,
//      and accumulates dV += P^T dO, dK += dS^T Q * scale with dS = P * (dO V^T - D) * S'
//      (S' the softcap's derivative, else 1) locally, so GQA needs no atomics for dK/dV.
//      dQ += dS K * scale goes to an accumulator with atomic adds (summation order then depends
//      on thread timing).
//   3. deterministic mode: the main pass leaves dQ alone and a query-block-parallel pass
//      recomputes dS and sums dQ per row in key order, so results are bitwise reproducible.
// Workgroups of both passes are visited through the mapping library (see bwd_params.h); packed
// batches run on ragged grids.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "cpu/cpu_backend.h"
#include "cpu/scores.h"
#include "mapping/topology.h"
#if defined(CFA_EMULATE)
#include "ops/emulated/cdna3.h"
#endif

namespace chiplet_fa {
namespace {

template <typename Acc>
Acc dot(const Acc* a, const Acc* b, int n) {
  Acc s = 0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// One query row (sequence b, q_head h, row i of the sequence) staged in the accumulator type.
template <typename T, typename Acc>
struct QueryRow {
  std::vector<Acc> q_scaled, dout;  // q * softmax_scale, so the scores' dot product is q_scaled . k
  Acc lse = 0, delta = 0;

  explicit QueryRow(int D) : q_scaled(D), dout(D) {}

  // Returns false for a fully masked row (lse -inf): it has no gradient.
  bool load(const BwdParams& p, int b, int h, const Sequence& s, int i) {
    using Lse = typename LseOf<T>::type;
    const Lse l = static_cast<const Lse*>(p.softmax_lse)[b * p.lse_batch_stride + h * p.lse_head_stride + s.q_start + i];
    if (l == -std::numeric_limits<Lse>::infinity()) return false;
    lse = Acc(l);
    delta = static_cast<const Acc*>(p.softmax_d)[p.stats_row(b, h, s) + i];
    const int64_t row = s.q_start + i;
    const T* q = static_cast<const T*>(p.q) + b * p.q_batch_stride + row * p.q_row_stride + h * p.q_head_stride;
    const T* d = static_cast<const T*>(p.dout) + b * p.do_batch_stride + row * p.do_row_stride + h * p.do_head_stride;
    const Acc scale = Acc(p.softmax_scale);
    for (int x = 0; x < p.head_dim; ++x) {
      q_scaled[x] = Acc(q[x]) * scale;
      dout[x] = Acc(d[x]);
    }
    return true;
  }

  // P and dS of this row (i) against key j (k, v): P = exp(logit - lse), dS = P (dO . v - D) S'.
  void prob_grad(const CpuScores<Acc>& scores, int i, int j, const Acc* k, const Acc* v, int D, Acc* prob,
                 Acc* dscore) const {
    Acc grad;
    *prob = std::exp(scores.logit(dot(q_scaled.data(), k, D), i, j, &grad) - lse);
    *dscore = *prob * (dot(dout.data(), v, D) - delta) * grad;
  }
};

// Keys [n0, n0 + cols) of one KV head of sequence b, staged in the accumulator type.
template <typename T, typename Acc>
void load_kv_block(const BwdParams& p, int b, const Sequence& s, int kv_head, int n0, int cols, Acc* ks, Acc* vs) {
  const T* k = static_cast<const T*>(p.k) + b * p.k_batch_stride + s.k_start * p.k_row_stride + kv_head * p.k_head_stride;
  const T* v = static_cast<const T*>(p.v) + b * p.v_batch_stride + s.k_start * p.v_row_stride + kv_head * p.v_head_stride;
  const int D = p.head_dim;
  for (int c = 0; c < cols; ++c)
    for (int x = 0; x < D; ++x) {
      ks[size_t(c) * D + x] = Acc(k[(n0 + c) * p.k_row_stride + x]);
      vs[size_t(c) * D + x] = Acc(v[(n0 + c) * p.v_row_stride + x]);
    }
}

template <typename T, typename Acc>
void preprocess(const BwdParams& p) {
  const int D = p.head_dim;
  Acc* delta = static_cast<Acc*>(p.softmax_d);
  at::parallel_for(0, int64_t(p.batch) * p.num_q_heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t bh = begin; bh < end; ++bh) {
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
    }
  });
}

template <typename T, typename Acc>
void kv_block(const BwdParams& p, const KvTile& t) {
  const int D = p.head_dim, G = p.group_size();
  const Sequence s = p.sequence(t.batch);
  const int n0 = t.n_block * p.block_n;
  const int cols = std::min(p.block_n, s.len_k - n0);
  if (cols <= 0) return;
  std::vector<Acc> ks(size_t(cols) * D), vs(size_t(cols) * D);
  std::vector<Acc> dk(size_t(cols) * D, Acc(0)), dv(size_t(cols) * D, Acc(0)), dq(D);
  load_kv_block<T, Acc>(p, t.batch, s, t.kv_head, n0, cols, ks.data(), vs.data());
  QueryRow<T, Acc> row(D);
  const Acc scale = Acc(p.softmax_scale);
  const KeyWindow w = p.key_window(s);
  // Only rows whose window reaches into [n0, n0 + cols) contribute.
  const int i_begin = w.first_row(n0), i_end = w.end_row(n0 + cols);
  for (int j = 0; j < G; ++j) {
    const int h = t.kv_head * G + j;
    const CpuScores<Acc> scores(p, t.batch, h, s);
    for (int i = i_begin; i < i_end; ++i) {
      const int c_begin = scores.begin(i, n0), c_end = scores.end(i, n0, cols);
      if (c_begin >= c_end || !row.load(p, t.batch, h, s, i)) continue;
      std::fill(dq.begin(), dq.end(), Acc(0));
      for (int c = c_begin; c < c_end; ++c) {
        const Acc* kc = &ks[size_t(c) * D];
        Acc prob, ds;
        row.prob_grad(scores, i, n0 + c, kc, &vs[size_t(c) * D], D, &prob, &ds);
        Acc* dkc = &dk[size_t(c) * D];
        Acc* dvc = &dv[size_t(c) * D];
        for (int x = 0; x < D; ++x) {
          dvc[x] += prob * row.dout[x];
          dkc[x] += ds * row.q_scaled[x];
          dq[x] += ds * kc[x];
        }
      }
      if (p.deterministic) continue;
      Acc* dq_out = static_cast<Acc*>(p.dq_accum) + p.dq_offset(t.batch, s, i, h);
      for (int x = 0; x < D; ++x)
        std::atomic_ref<Acc>(dq_out[x]).fetch_add(dq[x] * scale, std::memory_order_relaxed);
    }
  }
  const int64_t k0 = s.k_start + n0;
  T* dk_out = static_cast<T*>(p.dk) + t.batch * p.dk_batch_stride + k0 * p.dk_row_stride + t.kv_head * p.dk_head_stride;
  T* dv_out = static_cast<T*>(p.dv) + t.batch * p.dv_batch_stride + k0 * p.dv_row_stride + t.kv_head * p.dv_head_stride;
  for (int c = 0; c < cols; ++c)
    for (int x = 0; x < D; ++x) {
      dk_out[c * p.dk_row_stride + x] = T(dk[size_t(c) * D + x]);
      dv_out[c * p.dv_row_stride + x] = T(dv[size_t(c) * D + x]);
    }
}

// Deterministic dQ for one forward tile (sequence, q_head, m_block): keys streamed in order.
template <typename T, typename Acc>
void dq_tile(const BwdParams& p, const Tile& t) {
  const int D = p.head_dim;
  const Sequence s = p.sequence(t.batch);
  const int m0 = t.m_block * p.block_m;
  const int rows = std::min(p.block_m, s.len_q - m0);
  if (rows <= 0) return;
  const int kv_head = t.q_head / p.group_size();
  const CpuScores<Acc> scores(p, t.batch, t.q_head, s);
  std::vector<QueryRow<T, Acc>> qrows(rows, QueryRow<T, Acc>(D));
  std::vector<char> live(rows);
  std::vector<Acc> dq(size_t(rows) * D, Acc(0));
  std::vector<Acc> ks(size_t(p.block_n) * D), vs(size_t(p.block_n) * D);
  for (int r = 0; r < rows; ++r) live[r] = qrows[r].load(p, t.batch, t.q_head, s, m0 + r);
  // Keys outside every row's window are never read.
  const int n_begin = scores.window.begin(m0), n_end = scores.window.end(m0 + rows - 1);
  for (int n0 = n_begin; n0 < n_end; n0 += p.block_n) {
    const int cols = std::min(p.block_n, n_end - n0);
    load_kv_block<T, Acc>(p, t.batch, s, kv_head, n0, cols, ks.data(), vs.data());
    for (int r = 0; r < rows; ++r) {
      if (!live[r]) continue;
      const int i = m0 + r;
      Acc* dqr = &dq[size_t(r) * D];
      for (int c = scores.begin(i, n0), c_end = scores.end(i, n0, cols); c < c_end; ++c) {
        const Acc* kc = &ks[size_t(c) * D];
        Acc prob, ds;
        qrows[r].prob_grad(scores, i, n0 + c, kc, &vs[size_t(c) * D], D, &prob, &ds);
        for (int x = 0; x < D; ++x) dqr[x] += ds * kc[x];
      }
    }
  }
  const Acc scale = Acc(p.softmax_scale);
  for (int r = 0; r < rows; ++r) {
    Acc* o = static_cast<Acc*>(p.dq_accum) + p.dq_offset(t.batch, s, m0 + r, t.q_head);
    for (int x = 0; x < D; ++x) o[x] = dq[size_t(r) * D + x] * scale;
  }
}

template <typename T, typename Acc>
void bwd_all(const BwdParams& p) {
  preprocess<T, Acc>(p);
  const GridShape kv = p.kv_grid_shape();
  at::parallel_for(0, grid_size(kv), 1, [&](int64_t begin, int64_t end) {
    for (int64_t wid = begin; wid < end; ++wid) kv_block<T, Acc>(p, map_kv_workgroup(p, wid));
  });
  if (!p.deterministic) return;
  const GridShape g = p.grid_shape();
  at::parallel_for(0, grid_size(g), 1, [&](int64_t begin, int64_t end) {
    for (int64_t wid = begin; wid < end; ++wid) dq_tile<T, Acc>(p, map_workgroup(p.mapping, wid, g));
  });
}

}  // namespace

BwdResult bwd_cpu(const BwdArgs& args) {
#if defined(CFA_EMULATE)
  if (emulated_bwd_takes(args.q)) return emulated_bwd(args);
#endif
  BwdTensors t;
  BwdParams p = prepare_bwd(args, kCpuBlockM, kCpuBlockN, 1, detect_num_xcds(args.q.device()), t);
  t.dq_accum.zero_();
  RaggedGrid q_grid(p.cu_seqlens_q, p.batch, kCpuBlockM), k_grid(p.cu_seqlens_k, p.batch, kCpuBlockN);
  p.block_offsets = q_grid.offsets();
  p.kv_block_offsets = k_grid.offsets();
  switch (dtype_of(args.q)) {
    case DType::kFloat16: bwd_all<at::Half, float>(p); break;
    case DType::kBFloat16: bwd_all<at::BFloat16, float>(p); break;
    case DType::kFloat32: bwd_all<float, float>(p); break;
    case DType::kFloat64: bwd_all<double, double>(p); break;
  }
  return {t.dq_accum.to(args.q.scalar_type()), t.dk, t.dv};
}

}  // namespace chiplet_fa
