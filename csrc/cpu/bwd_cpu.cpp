// CPU backward: the reference path CI runs, with the GPU kernels' structure.
//   1. preprocess: D = rowsum(dO * O) per query row.
//   2. main pass, KV-block parallel: a workgroup owns block_n keys of one KV head, recomputes
//      P = exp(S - lse) for every query row of the G query heads of its group that sees them,
//      and accumulates dV += P^T dO, dK += dS^T Q * scale with dS = P * (dO V^T - D) locally,
//      so GQA needs no atomics for dK/dV. dQ += dS K * scale goes to an accumulator with
//      atomic adds (summation order then depends on thread timing).
//   3. deterministic mode: the main pass leaves dQ alone and a query-block-parallel pass
//      recomputes dS and sums dQ per row in key order, so results are bitwise reproducible.
// Workgroups of both passes are visited through the mapping library (see bwd_params.h).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "mapping/topology.h"
#include "ops/bwd_api.h"
#include "ops/fwd_api.h"
#if defined(CFA_EMULATE)
#include "ops/emulated/cdna3.h"
#endif

namespace chiplet_fa {
namespace {

constexpr int kCpuBlockM = 64;
constexpr int kCpuBlockN = 64;

template <typename Acc>
Acc dot(const Acc* a, const Acc* b, int n) {
  Acc s = 0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// One query row (batch b, q_head h, row i) staged in the accumulator type.
template <typename T, typename Acc>
struct QueryRow {
  std::vector<Acc> q_scaled, dout;  // q * softmax_scale, so S = q_scaled . k
  Acc lse = 0, delta = 0;

  explicit QueryRow(int D) : q_scaled(D), dout(D) {}

  // Returns false for a fully masked row (lse -inf): it has no gradient.
  bool load(const BwdParams& p, int b, int h, int i) {
    const float l = p.softmax_lse[(int64_t(b) * p.num_q_heads + h) * p.seqlen_q + i];
    if (l == -std::numeric_limits<float>::infinity()) return false;
    lse = Acc(l);
    delta = static_cast<const Acc*>(p.softmax_d)[(int64_t(b) * p.num_q_heads + h) * p.seqlen_q_rounded + i];
    const T* q = static_cast<const T*>(p.q) + b * p.q_batch_stride + i * p.q_row_stride + h * p.q_head_stride;
    const T* d = static_cast<const T*>(p.dout) + b * p.do_batch_stride + i * p.do_row_stride + h * p.do_head_stride;
    const Acc scale = Acc(p.softmax_scale);
    for (int x = 0; x < p.head_dim; ++x) {
      q_scaled[x] = Acc(q[x]) * scale;
      dout[x] = Acc(d[x]);
    }
    return true;
  }

  // P and dS of this row against one key (k, v): P = exp(S - lse), dS = P * (dO . v - D).
  void prob_grad(const Acc* k, const Acc* v, int D, Acc* prob, Acc* dscore) const {
    *prob = std::exp(dot(q_scaled.data(), k, D) - lse);
    *dscore = *prob * (dot(dout.data(), v, D) - delta);
  }
};

// Keys [n0, n0 + cols) of one KV head, staged in the accumulator type.
template <typename T, typename Acc>
void load_kv_block(const BwdParams& p, int b, int kv_head, int n0, int cols, Acc* ks, Acc* vs) {
  const T* k = static_cast<const T*>(p.k) + b * p.k_batch_stride + kv_head * p.k_head_stride;
  const T* v = static_cast<const T*>(p.v) + b * p.v_batch_stride + kv_head * p.v_head_stride;
  const int D = p.head_dim;
  for (int c = 0; c < cols; ++c)
    for (int x = 0; x < D; ++x) {
      ks[size_t(c) * D + x] = Acc(k[(n0 + c) * p.k_row_stride + x]);
      vs[size_t(c) * D + x] = Acc(v[(n0 + c) * p.v_row_stride + x]);
    }
}

// Keys of a block of `cols` starting at n0 that query row i sees.
int visible_keys(const BwdParams& p, int i, int n0, int cols) {
  if (!p.causal) return cols;
  return std::max(0, std::min(cols, i + p.causal_offset() - n0 + 1));
}

template <typename T, typename Acc>
void preprocess(const BwdParams& p) {
  const int D = p.head_dim;
  Acc* delta = static_cast<Acc*>(p.softmax_d);
  const int64_t rows = int64_t(p.batch) * p.num_q_heads * p.seqlen_q;
  at::parallel_for(0, rows, 256, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t i = r % p.seqlen_q, h = (r / p.seqlen_q) % p.num_q_heads;
      const int64_t b = r / (int64_t(p.seqlen_q) * p.num_q_heads);
      const T* o = static_cast<const T*>(p.out) + b * p.o_batch_stride + i * p.o_row_stride + h * p.o_head_stride;
      const T* d = static_cast<const T*>(p.dout) + b * p.do_batch_stride + i * p.do_row_stride + h * p.do_head_stride;
      Acc s = 0;
      for (int x = 0; x < D; ++x) s += Acc(o[x]) * Acc(d[x]);
      delta[(b * p.num_q_heads + h) * p.seqlen_q_rounded + i] = s;
    }
  });
}

template <typename T, typename Acc>
void kv_block(const BwdParams& p, const KvTile& t) {
  const int D = p.head_dim, G = p.group_size();
  const int n0 = t.n_block * p.block_n;
  const int cols = std::min(p.block_n, p.seqlen_k - n0);
  std::vector<Acc> ks(size_t(cols) * D), vs(size_t(cols) * D);
  std::vector<Acc> dk(size_t(cols) * D, Acc(0)), dv(size_t(cols) * D, Acc(0)), dq(D);
  load_kv_block<T, Acc>(p, t.batch, t.kv_head, n0, cols, ks.data(), vs.data());
  QueryRow<T, Acc> row(D);
  const Acc scale = Acc(p.softmax_scale);
  // Rows above the first that sees key n0 contribute nothing.
  const int i_begin = p.causal ? std::max(0, n0 - p.causal_offset()) : 0;
  for (int j = 0; j < G; ++j) {
    const int h = t.kv_head * G + j;
    for (int i = i_begin; i < p.seqlen_q; ++i) {
      if (!row.load(p, t.batch, h, i)) continue;
      const int limit = visible_keys(p, i, n0, cols);
      std::fill(dq.begin(), dq.end(), Acc(0));
      for (int c = 0; c < limit; ++c) {
        const Acc* kc = &ks[size_t(c) * D];
        Acc prob, ds;
        row.prob_grad(kc, &vs[size_t(c) * D], D, &prob, &ds);
        Acc* dkc = &dk[size_t(c) * D];
        Acc* dvc = &dv[size_t(c) * D];
        for (int x = 0; x < D; ++x) {
          dvc[x] += prob * row.dout[x];
          dkc[x] += ds * row.q_scaled[x];
          dq[x] += ds * kc[x];
        }
      }
      if (p.deterministic || limit == 0) continue;
      Acc* dq_out = static_cast<Acc*>(p.dq_accum) +
                    ((int64_t(t.batch) * p.seqlen_q + i) * p.num_q_heads + h) * D;
      for (int x = 0; x < D; ++x)
        std::atomic_ref<Acc>(dq_out[x]).fetch_add(dq[x] * scale, std::memory_order_relaxed);
    }
  }
  T* dk_out = static_cast<T*>(p.dk) + t.batch * p.dk_batch_stride + t.kv_head * p.dk_head_stride;
  T* dv_out = static_cast<T*>(p.dv) + t.batch * p.dv_batch_stride + t.kv_head * p.dv_head_stride;
  for (int c = 0; c < cols; ++c)
    for (int x = 0; x < D; ++x) {
      dk_out[(n0 + c) * p.dk_row_stride + x] = T(dk[size_t(c) * D + x]);
      dv_out[(n0 + c) * p.dv_row_stride + x] = T(dv[size_t(c) * D + x]);
    }
}

// Deterministic dQ for one forward tile (batch, q_head, m_block): keys streamed in order.
template <typename T, typename Acc>
void dq_tile(const BwdParams& p, const Tile& t) {
  const int D = p.head_dim;
  const int m0 = t.m_block * p.block_m;
  const int rows = std::min(p.block_m, p.seqlen_q - m0);
  const int kv_head = t.q_head / p.group_size();
  std::vector<QueryRow<T, Acc>> qrows(rows, QueryRow<T, Acc>(D));
  std::vector<char> live(rows);
  std::vector<Acc> dq(size_t(rows) * D, Acc(0));
  std::vector<Acc> ks(size_t(p.block_n) * D), vs(size_t(p.block_n) * D);
  for (int r = 0; r < rows; ++r) live[r] = qrows[r].load(p, t.batch, t.q_head, m0 + r);
  int n_end = p.seqlen_k;  // keys past the last row's causal limit are never read
  if (p.causal) n_end = std::max(0, std::min(n_end, m0 + rows + p.causal_offset()));
  for (int n0 = 0; n0 < n_end; n0 += p.block_n) {
    const int cols = std::min(p.block_n, n_end - n0);
    load_kv_block<T, Acc>(p, t.batch, kv_head, n0, cols, ks.data(), vs.data());
    for (int r = 0; r < rows; ++r) {
      if (!live[r]) continue;
      const int limit = visible_keys(p, m0 + r, n0, cols);
      Acc* dqr = &dq[size_t(r) * D];
      for (int c = 0; c < limit; ++c) {
        const Acc* kc = &ks[size_t(c) * D];
        Acc prob, ds;
        qrows[r].prob_grad(kc, &vs[size_t(c) * D], D, &prob, &ds);
        for (int x = 0; x < D; ++x) dqr[x] += ds * kc[x];
      }
    }
  }
  const Acc scale = Acc(p.softmax_scale);
  Acc* dq_out = static_cast<Acc*>(p.dq_accum);
  for (int r = 0; r < rows; ++r) {
    Acc* o = dq_out + ((int64_t(t.batch) * p.seqlen_q + m0 + r) * p.num_q_heads + t.q_head) * D;
    for (int x = 0; x < D; ++x) o[x] = dq[size_t(r) * D + x] * scale;
  }
}

template <typename T, typename Acc>
void bwd_all(const BwdParams& p) {
  preprocess<T, Acc>(p);
  at::parallel_for(0, grid_size(p.kv_grid_shape()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t wid = begin; wid < end; ++wid) kv_block<T, Acc>(p, map_kv_workgroup(p, wid));
  });
  if (!p.deterministic) return;
  const GridShape g = p.grid_shape();
  at::parallel_for(0, grid_size(g), 1, [&](int64_t begin, int64_t end) {
    for (int64_t wid = begin; wid < end; ++wid) dq_tile<T, Acc>(p, map_workgroup(p.mapping, wid, g));
  });
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> bwd_cpu(
    const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& out, const at::Tensor& softmax_lse, std::optional<double> softmax_scale,
    bool causal, std::string mapping, int64_t num_xcds, bool deterministic) {
  const BwdArgs args{dout, q, k, v, out, softmax_lse, softmax_scale, causal, mapping, num_xcds,
                     deterministic};
#if defined(CFA_EMULATE)
  if (emulated_bwd_takes(q)) return emulated_bwd(args);
#endif
  BwdTensors t;
  const BwdParams p = prepare_bwd(args, kCpuBlockM, kCpuBlockN, 1, detect_num_xcds(q.device()), t);
  switch (dtype_of(q)) {
    case DType::kFloat16: bwd_all<at::Half, float>(p); break;
    case DType::kBFloat16: bwd_all<at::BFloat16, float>(p); break;
    case DType::kFloat32: bwd_all<float, float>(p); break;
    case DType::kFloat64: bwd_all<double, double>(p); break;
  }
  return {t.dq_accum.to(q.scalar_type()), t.dk, t.dv};
}

}  // namespace

TORCH_LIBRARY_IMPL(chiplet_fa, CPU, m) { m.impl("bwd", &bwd_cpu); }

}  // namespace chiplet_fa
