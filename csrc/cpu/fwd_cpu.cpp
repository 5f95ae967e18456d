// CPU forward: the reference path CI runs. Same tiling as the GPU kernels (one workgroup =
// one block_m x D tile of Q streaming K/V blocks with an online softmax), and the tiles are
// visited through map_workgroup, so every mapping policy is exercised on a machine without GPU.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "mapping/mapping.h"
#include "mapping/topology.h"
#include "ops/fwd_api.h"
#if defined(CFA_EMULATE)
#include "ops/emulated/cdna3.h"
#endif

namespace chiplet_fa {
namespace {

constexpr int kCpuBlockM = 64;
constexpr int kCpuBlockN = 64;

template <typename T, typename Acc>
void fwd_tile(const FwdParams& p, const Tile& t) {
  const int D = p.head_dim;
  const int m0 = t.m_block * p.block_m;
  const int rows = std::min(p.block_m, p.seqlen_q - m0);
  const auto [q, k, v, out, lse] = p.head_slabs<T>(t.batch, t.q_head);

  const Acc scale = Acc(p.softmax_scale);
  const Acc neg_inf = -std::numeric_limits<Acc>::infinity();
  std::vector<Acc> qs(size_t(rows) * D), ks(size_t(kCpuBlockN) * D), vs(size_t(kCpuBlockN) * D);
  std::vector<Acc> acc(size_t(rows) * D, Acc(0)), row_max(rows, neg_inf), row_sum(rows, Acc(0));
  std::vector<Acc> s(kCpuBlockN);
  for (int r = 0; r < rows; ++r)
    for (int d = 0; d < D; ++d) qs[size_t(r) * D + d] = Acc(q[(m0 + r) * p.q_row_stride + d]) * scale;

  const int n_end = p.key_end(m0 + rows);  // keys past the last row's causal limit are never read
  for (int n0 = 0; n0 < n_end; n0 += kCpuBlockN) {
    const int cols = std::min(kCpuBlockN, n_end - n0);
    for (int c = 0; c < cols; ++c)
      for (int d = 0; d < D; ++d) {
        ks[size_t(c) * D + d] = Acc(k[(n0 + c) * p.k_row_stride + d]);
        vs[size_t(c) * D + d] = Acc(v[(n0 + c) * p.v_row_stride + d]);
      }
    for (int r = 0; r < rows; ++r) {
      const int limit = p.causal ? std::min(cols, m0 + r + p.causal_offset() - n0 + 1) : cols;
      if (limit <= 0) continue;  // this row sees no key of the block
      const Acc* qr = &qs[size_t(r) * D];
      Acc block_max = neg_inf;
      for (int c = 0; c < limit; ++c) {
        const Acc* kc = &ks[size_t(c) * D];
        Acc dot = 0;
        for (int d = 0; d < D; ++d) dot += qr[d] * kc[d];
        s[c] = dot;
        block_max = std::max(block_max, dot);
      }
      const Acc new_max = std::max(row_max[r], block_max);
      const Acc alpha = std::exp(row_max[r] - new_max);  // exp(-inf) = 0 on the first block
      Acc* ar = &acc[size_t(r) * D];
      for (int d = 0; d < D; ++d) ar[d] *= alpha;
      Acc sum = 0;
      for (int c = 0; c < limit; ++c) {
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
  at::parallel_for(0, grid_size(g), 1, [&](int64_t begin, int64_t end) {
    for (int64_t wid = begin; wid < end; ++wid) fwd_tile<T, Acc>(p, map_workgroup(p.mapping, wid, g));
  });
}

std::tuple<at::Tensor, at::Tensor> fwd_cpu(const at::Tensor& q, const at::Tensor& k,
                                           const at::Tensor& v, std::optional<double> softmax_scale,
                                           bool causal, std::string mapping, int64_t num_xcds) {
  const FwdArgs args{q, k, v, softmax_scale, causal, mapping, num_xcds};
#if defined(CFA_EMULATE)
  if (emulated_fwd_takes(q)) return emulated_fwd(args);
#endif
  at::Tensor out, lse;
  const FwdParams p = prepare_fwd(args, kCpuBlockM, detect_num_xcds(q.device()), out, lse);
  if (finish_without_kernel(p, out, lse)) return {out, lse};
  switch (dtype_of(q)) {
    case DType::kFloat16: fwd_all_tiles<at::Half, float>(p); break;
    case DType::kBFloat16: fwd_all_tiles<at::BFloat16, float>(p); break;
    // fp32 sums 256-term dot products: a float accumulator loses to torch's blocked matmul.
    case DType::kFloat32: fwd_all_tiles<float, double>(p); break;
    case DType::kFloat64: fwd_all_tiles<double, double>(p); break;
  }
  return {out, lse};
}

}  // namespace

TORCH_LIBRARY_IMPL(chiplet_fa, CPU, m) { m.impl("fwd", &fwd_cpu); }

}  // namespace chiplet_fa
