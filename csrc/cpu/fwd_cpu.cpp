// CPU forward: the reference path CI runs. Same tiling as the GPU kernels (one workgroup =
// one block_m x D tile of Q streaming K/V blocks with an online softmax), and the tiles are
// visited through map_workgroup, so every mapping policy is exercised on a machine without GPU;
// packed batches run on the same ragged grid the GPU uses.
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
#include "mapping/mapping.h"
#include "mapping/topology.h"
#if defined(CFA_EMULATE)
#include "ops/emulated/emulated_kernels.h"
#endif

namespace chiplet_fa {
namespace {

constexpr int kM = kCpuBlockM, kN = kCpuBlockN;

// One tile's operands in the accumulator type. The scores are computed transposed, key by key
// (S^T = K Q^T), so the softmax's per-row work runs with one vector lane per query row and each
// row's sum still adds its keys in order; Q is transposed once per tile, K and V are copied as they
// are, block after block. Zero padding: Q's columns to kM, the output's rows to whole register
// tiles and its columns (the head dim) to whole vectors.
template <typename Acc, typename Isa>
struct FwdTile {
  const int rows, dim;
  std::vector<Acc> qt;   // D x kM: q * scale, transposed
  std::vector<Acc> k;    // kN x D
  std::vector<Acc> v;    // kN x dim
  std::vector<Acc> st;   // kN x kM: scores, then probabilities
  std::vector<Acc> out;  // rows x dim: the unnormalised output
  std::array<Acc, kM> row_max, row_sum, alpha, shift;

  FwdTile(int live_rows, int D)
      : rows(round_up(live_rows, Isa::kTileRows)), dim(round_up(D, kTileCols<Acc, Isa>)), qt(size_t(D) * kM),
        k(size_t(kN) * D), v(size_t(kN) * dim), st(size_t(kN) * kM), out(size_t(rows) * dim) {
    row_max.fill(-std::numeric_limits<Acc>::infinity());
    row_sum.fill(Acc(0));
  }
};

// Scores of the keys [n0, n0 + cols) as the rows [m0, m0 + rows) see them: logits where a row sees
// the key, -inf elsewhere (and in the padding lanes).
template <typename Acc>
CFA_CPU_INLINE void mask_scores(const CpuScores<Acc>& scores, int m0, int rows, int n0, int cols, Acc* st) {
  const Acc neg_inf = -std::numeric_limits<Acc>::infinity();
  const bool transform = scores.softcap > 0 || scores.slope != 0;
  for (int c = 0; c < cols; ++c) {
    Acc* sc = st + c * kM;
    const int j = n0 + c;
    const int r_begin = std::max(scores.window.first_row(j) - m0, 0);
    const int r_end = std::min(scores.window.end_row(j + 1) - m0, rows);
    if (transform)
      for (int r = r_begin; r < r_end; ++r) sc[r] = scores.logit(sc[r], m0 + r, j);
    for (int r = 0; r < kM; ++r) sc[r] = ((r >= r_begin) & (r < r_end)) ? sc[r] : neg_inf;
  }
}

// The online softmax over one key block, every row at once: masked scores st (cols x kM) become
// probabilities against each row's new running max, and t.alpha the factor that rescales what a
// row has accumulated. A row that sees no key of the block keeps its max and sum (alpha 1).
template <typename Acc, typename Isa>
CFA_CPU_INLINE void softmax_block(FwdTile<Acc, Isa>& t, int cols) {
  std::array<Acc, kM> new_max = t.row_max;
  for (int c = 0; c < cols; ++c)
    for (int r = 0; r < kM; ++r) {
      const Acc x = t.st[c * kM + r];
      new_max[r] = x > new_max[r] ? x : new_max[r];  // (std::max's reference kept this loop scalar)
    }
  const Acc neg_inf = -std::numeric_limits<Acc>::infinity();
  for (int r = 0; r < kM; ++r) {
    t.alpha[r] = new_max[r] == t.row_max[r] ? Acc(0) : t.row_max[r] - new_max[r];  // -inf - -inf: no key yet
    t.shift[r] = new_max[r] == neg_inf ? Acc(0) : new_max[r];
  }
  exp_inplace(t.alpha.data(), kM);
  std::array<Acc, kM> sum{};
  for (int c = 0; c < cols; ++c) {
    Acc* p = &t.st[c * kM];
    for (int r = 0; r < kM; ++r) p[r] -= t.shift[r];
    exp_inplace(p, kM);
    for (int r = 0; r < kM; ++r) sum[r] += p[r];
  }
  for (int r = 0; r < kM; ++r) {
    t.row_sum[r] = t.row_sum[r] * t.alpha[r] + sum[r];
    t.row_max[r] = new_max[r];
  }
}

template <typename T, typename Acc>
CFA_CPU_INLINE void write_tile(const FwdParams& p, const FwdParams::HeadSlabs<T>& slabs, int m0, int rows,
                               const Acc* acc, int ld, const Acc* row_max, const Acc* row_sum) {
  for (int r = 0; r < rows; ++r) {
    const bool empty = row_sum[r] == Acc(0);  // fully masked row
    const Acc inv = empty ? Acc(0) : Acc(1) / row_sum[r];
    T* orow = slabs.out + (m0 + r) * p.o_row_stride;
    for (int d = 0; d < p.head_dim; ++d) orow[d] = T(acc[r * ld + d] * inv);
    using Lse = typename LseOf<T>::type;
    slabs.lse[m0 + r] = empty ? -std::numeric_limits<Lse>::infinity() : Lse(row_max[r] + std::log(row_sum[r]));
  }
}

template <typename T, typename Acc, typename Isa>
CFA_CPU_INLINE void fwd_tile(const FwdParams& p, const Tile& tile) {
  const Sequence seq = p.sequence(tile.batch);
  const int m0 = tile.m_block * p.block_m;
  const int rows = std::min(p.block_m, seq.len_q - m0);
  if (rows <= 0) return;
  const auto slabs = p.head_slabs<T>(tile.batch, tile.q_head, seq);
  const CpuScores<Acc> scores(p, tile.batch, tile.q_head, seq);
  const int D = p.head_dim;
  FwdTile<Acc, Isa> t(rows, D);
  stage_transposed(slabs.q + m0 * p.q_row_stride, p.q_row_stride, rows, D, Acc(p.softmax_scale), t.qt.data(), kM);

  // Keys outside every row's window are never read.
  const int n_begin = scores.window.begin(m0) / kN * kN;
  const int n_end = scores.window.end(m0 + rows - 1);
  for (int n0 = n_begin; n0 < n_end; n0 += kN) {
    const int cols = std::min(kN, n_end - n0);
    stage_rows(slabs.k + n0 * p.k_row_stride, p.k_row_stride, cols, D, Acc(1), t.k.data(), D);
    stage_rows(slabs.v + n0 * p.v_row_stride, p.v_row_stride, cols, D, Acc(1), t.v.data(), t.dim);
    std::fill(t.st.begin(), t.st.end(), Acc(0));
    matmul_add<Acc, Isa>(kN, kM, D, t.k.data(), D, 1, t.qt.data(), kM, t.st.data(), kM);
    mask_scores(scores, m0, rows, n0, cols, t.st.data());
    softmax_block(t, cols);
    for (int r = 0; r < rows; ++r)
      for (int d = 0; d < t.dim; ++d) t.out[r * t.dim + d] *= t.alpha[r];
    matmul_add<Acc, Isa>(t.rows, t.dim, cols, t.st.data(), 1, kM, t.v.data(), t.dim, t.out.data(), t.dim);
  }
  write_tile<T, Acc>(p, slabs, m0, rows, t.out.data(), t.dim, t.row_max.data(), t.row_sum.data());
}

template <typename T, typename Acc>
void fwd_all_tiles(const FwdParams& p) {
  const GridShape g = p.grid_shape();
  parallel_items(grid_size(g), [&](int64_t wid) {
    with_cpu_isa([&](auto isa) { fwd_tile<T, Acc, decltype(isa)>(p, map_workgroup(p.mapping, wid, g)); });
  });
}

}  // namespace

FwdResult fwd_cpu(const FwdArgs& args, const OptTensor& given_out) {
#if defined(CFA_EMULATE)
  if (emulated_fwd_takes(args.q)) return emulated_fwd(args, given_out);
#endif
  Tensor out, lse;
  FwdParams p = prepare_fwd(args, kCpuBlockM, kCpuXcds, out, lse, given_out);
  if (finish_without_kernel(p, out, lse)) return {out, lse};
  RaggedGrid grid(p.cu_seqlens_q, p.batch, kCpuBlockM);
  p.block_offsets = grid.offsets();
  switch (dtype_of(args.q)) {
    case DType::kFloat16: fwd_all_tiles<Half, float>(p); break;
    case DType::kBFloat16: fwd_all_tiles<BFloat16, float>(p); break;
    // fp32 sums 256-term dot products: a float accumulator loses to torch's blocked matmul.
    case DType::kFloat32: fwd_all_tiles<float, double>(p); break;
    case DType::kFloat64: fwd_all_tiles<double, double>(p); break;
  }
  return {out, lse};
}

STABLE_TORCH_LIBRARY_IMPL(chiplet_fa, CPU, m) { FwdOpEntry<fwd_cpu>::register_ops(m); }

}  // namespace chiplet_fa
