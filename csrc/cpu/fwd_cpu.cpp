// CPU forward: the reference path CI runs. Same tiling as the GPU kernels (one workgroup =
// one block_m x D tile of Q streaming K/V blocks with an online softmax), and the tiles are
// visited through map_workgroup, so every mapping policy is exercised on a machine without GPU;
// packed batches run on the same ragged grid the GPU uses.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <ATen/ATen.h>

#include "cpu/cpu_backend.h"
#include "cpu/parallel.h"
#include "cpu/scores.h"
#include "mapping/mapping.h"
#include "mapping/topology.h"
#if defined(CFA_EMULATE)
#include "ops/emulated/cdna3.h"
#endif

namespace chiplet_fa {
namespace {

template <typename T, typename Acc>
void fwd_tile(const FwdParams& p, const Tile& t) {
  const int D = p.head_dim;
  const Sequence seq = p.sequence(t.batch);
  const int m0 = t.m_block * p.block_m;
  const int rows = std::min(p.block_m, seq.len_q - m0);
  if (rows <= 0) return;
  const auto [q, k, v, out, lse] = p.head_slabs<T>(t.batch, t.q_head, seq);
  const CpuScores<Acc> scores(p, t.batch, t.q_head, seq);

  const Acc scale = Acc(p.softmax_scale);
  const Acc neg_inf = -std::numeric_limits<Acc>::infinity();
  std::vector<Acc> qs(size_t(rows) * D), ks(size_t(kCpuBlockN) * D), vs(size_t(kCpuBlockN) * D);
  std::vector<Acc> acc(size_t(rows) * D, Acc(0)), row_max(rows, neg_inf), row_sum(rows, Acc(0));
  std::vector<Acc> s(kCpuBlockN);
  for (int r = 0; r < rows; ++r)
    for (int d = 0; d < D; ++d) qs[size_t(r) * D + d] = Acc(q[(m0 + r) * p.q_row_stride + d]) * scale;

  // Keys outside every row's window are never read.
  const int n_begin = scores.window.begin(m0) / kCpuBlockN * kCpuBlockN;
  const int n_end = scores.window.end(m0 + rows - 1);
  for (int n0 = n_begin; n0 < n_end; n0 += kCpuBlockN) {
    const int cols = std::min(kCpuBlockN, n_end - n0);
    for (int c = 0; c < cols; ++c)
      for (int d = 0; d < D; ++d) {
        ks[size_t(c) * D + d] = Acc(k[(n0 + c) * p.k_row_stride + d]);
        vs[size_t(c) * D + d] = Acc(v[(n0 + c) * p.v_row_stride + d]);
      }
    for (int r = 0; r < rows; ++r) {
      const int i = m0 + r, c_begin = scores.begin(i, n0), c_end = scores.end(i, n0, cols);
      if (c_begin >= c_end) continue;  // this row sees no key of the block
      const Acc* qr = &qs[size_t(r) * D];
      Acc block_max = neg_inf;
      for (int c = c_begin; c < c_end; ++c) {
        const Acc* kc = &ks[size_t(c) * D];
        Acc dot = 0;
        for (int d = 0; d < D; ++d) dot += qr[d] * kc[d];
        s[c] = scores.logit(dot, i, n0 + c);
        block_max = std::max(block_max, s[c]);
      }
      const Acc new_max = std::max(row_max[r], block_max);
      const Acc alpha = std::exp(row_max[r] - new_max);  // exp(-inf) = 0 on the first block
      Acc* ar = &acc[size_t(r) * D];
      for (int d = 0; d < D; ++d) ar[d] *= alpha;
      Acc sum = 0;
      for (int c = c_begin; c < c_end; ++c) {
        const Acc pc = std::exp(s[c] - new_max);
        sum += pc;
        const Acc* vc = &vs[size_t(c) * D];
        for (int d = 0; d < D; ++d) ar[d] += pc * vc[d];
      }
      row_sum[r] = row_sum[r] * alpha + sum;
      row_max[r] = new_max;
    }
  }
  for (int r = 0; r < rows; ++r) {
    const bool empty = row_sum[r] == Acc(0);  // fully masked row
    const Acc inv = empty ? Acc(0) : Acc(1) / row_sum[r];
    T* orow = out + (m0 + r) * p.o_row_stride;
    for (int d = 0; d < D; ++d) orow[d] = T(acc[size_t(r) * D + d] * inv);
    lse[m0 + r] = empty ? -std::numeric_limits<float>::infinity()
                        : float(row_max[r] + std::log(row_sum[r]));
  }
}

template <typename T, typename Acc>
void fwd_all_tiles(const FwdParams& p) {
  const GridShape g = p.grid_shape();
  parallel_items(grid_size(g), [&](int64_t wid) { fwd_tile<T, Acc>(p, map_workgroup(p.mapping, wid, g)); });
}

}  // namespace

FwdResult fwd_cpu(const FwdArgs& args, const std::optional<at::Tensor>& given_out) {
#if defined(CFA_EMULATE)
  if (emulated_fwd_takes(args.q)) return emulated_fwd(args, given_out);
#endif
  at::Tensor out, lse;
  FwdParams p = prepare_fwd(args, kCpuBlockM, detect_num_xcds(args.q.device()), out, lse, given_out);
  if (finish_without_kernel(p, out, lse)) return {out, lse};
  RaggedGrid grid(p.cu_seqlens_q, p.batch, kCpuBlockM);
  p.block_offsets = grid.offsets();
  switch (dtype_of(args.q)) {
    case DType::kFloat16: fwd_all_tiles<at::Half, float>(p); break;
    case DType::kBFloat16: fwd_all_tiles<at::BFloat16, float>(p); break;
    // fp32 sums 256-term dot products: a float accumulator loses to torch's blocked matmul.
    case DType::kFloat32: fwd_all_tiles<float, double>(p); break;
    case DType::kFloat64: fwd_all_tiles<double, double>(p); break;
  }
  return {out, lse};
}

}  // namespace chiplet_fa
