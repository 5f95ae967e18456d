// The CPU backend of chiplet_fa::fwd_kvcache and its registration: the appends and rotary embedding
// with ATen, then each sequence's visible keys gathered from the cache (contiguous or paged) into
// a packed batch that the CPU forward (fwd_cpu) attends to. One pass a sequence: num_splits only
// shapes the GPU kernels' work. In an emulated build float16/bfloat16 calls run the CDNA3 decoding
// kernels instead.
#include <algorithm>
#include <vector>

#include <ATen/ATen.h>
#include <torch/library.h>

#include "cpu/cpu_backend.h"
#include "ops/decode_entry.h"
#if defined(CFA_EMULATE)
#include "mapping/topology.h"
#include "ops/decode_binding.h"
#include "ops/emulated/emulated_kernels.h"
#endif

namespace chiplet_fa {
namespace {

// x (N, H, D) rotated at the positions whose cos/sin rows are given ((N, rotary_dim / 2) each),
// in float (double for float64) as the kernels do.
at::Tensor rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool interleaved) {
  const at::ScalarType t = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const int64_t half = cos.size(1), dim = x.size(-1);
  const at::Tensor xf = x.to(t), c = cos.to(t).unsqueeze(1), s = sin.to(t).unsqueeze(1);
  const at::Tensor head = xf.narrow(-1, 0, 2 * half);
  at::Tensor turned;
  if (interleaved) {
    const at::Tensor pairs = head.unflatten(-1, {half, 2}), x1 = pairs.select(-1, 0), x2 = pairs.select(-1, 1);
    turned = at::stack({x1 * c - x2 * s, x2 * c + x1 * s}, -1).flatten(-2);
  } else {
    const at::Tensor x1 = head.narrow(-1, 0, half), x2 = head.narrow(-1, half, half);
    turned = at::cat({x1 * c - x2 * s, x2 * c + x1 * s}, -1);
  }
  return at::cat({turned, xf.narrow(-1, 2 * half, dim - 2 * half)}, -1).to(x.scalar_type());
}

// Cache rows (page, row in page) of keys [from, to) of sequence b.
std::pair<at::Tensor, at::Tensor> cache_rows(const DecodeArgs& a, const DecodeDims& d, int64_t b, int64_t slot,
                                             int64_t from, int64_t to) {
  const at::Tensor keys = at::arange(from, to, a.q.options().dtype(at::kLong));
  if (!a.paged()) return {at::full_like(keys, slot), keys};
  const at::Tensor pages = a.block_table->select(0, b).to(at::kLong).index_select(0, at::floor_divide(keys, d.cache_rows));
  return {pages, at::remainder(keys, d.cache_rows)};
}

int64_t value_at(const std::optional<at::Tensor>& t, int64_t b, int64_t fallback) {
  return t ? t->select(0, b).item<int32_t>() : fallback;
}

DecodeResult decode_on_cpu(const DecodeArgs& a, const DecodeDims& d) {
  const bool per_token = a.mask.causal || a.mask.window_left >= 0 || a.mask.window_right >= 0;
  at::Tensor q = a.q;
  std::vector<at::Tensor> keys, values;
  std::vector<int32_t> cu_k{0};
  std::vector<at::Tensor> rotated_q;
  for (int64_t b = 0; b < d.batch; ++b) {
    const int64_t cached = value_at(a.cache_seqlens, b, d.capacity), slot = value_at(a.cache_batch_idx, b, b);
    const int64_t begin = value_at(a.cache_leftpad, b, 0), end = a.cache_seqlens ? cached + d.seqlen_new : cached;
    if (a.k) {
      at::Tensor k = a.k->select(0, b), v = a.v->select(0, b);
      if (d.rotary_dim > 0) {
        const at::Tensor at_pos = at::arange(cached, cached + d.seqlen_new, q.options().dtype(at::kLong));
        k = rotary(k, a.rotary_cos->index_select(0, at_pos), a.rotary_sin->index_select(0, at_pos), a.rotary_interleaved);
      }
      const auto [pages, rows] = cache_rows(a, d, b, slot, cached, end);
      a.k_cache.index_put_({pages, rows}, k);
      a.v_cache.index_put_({pages, rows}, v);
    }
    if (d.rotary_dim > 0) {
      const at::Tensor at_pos = per_token ? at::arange(cached, cached + d.seqlen_q, q.options().dtype(at::kLong))
                                          : at::full({d.seqlen_q}, cached, q.options().dtype(at::kLong));
      rotated_q.push_back(rotary(a.q.select(0, b), a.rotary_cos->index_select(0, at_pos),
                                 a.rotary_sin->index_select(0, at_pos), a.rotary_interleaved));
    }
    const auto [pages, rows] = cache_rows(a, d, b, slot, begin, end);
    keys.push_back(a.k_cache.index({pages, rows}));
    values.push_back(a.v_cache.index({pages, rows}));
    cu_k.push_back(cu_k.back() + int32_t(end - begin));
  }
  if (d.rotary_dim > 0) q = at::stack(rotated_q);
  const auto int_opts = q.options().dtype(at::kInt);
  const at::Tensor cu_q = at::arange(d.batch + 1, int_opts) * d.seqlen_q;
  const at::Tensor cu_k_t = at::tensor(cu_k, int_opts);
  const int64_t longest = d.batch ? *std::max_element(cu_k.begin() + 1, cu_k.end()) : 0;
  const at::Tensor empty_kv = at::empty({0, d.num_kv_heads, d.head_dim}, q.options());
  const FwdArgs args{q.reshape({d.batch * d.seqlen_q, d.num_q_heads, d.head_dim}),
                     d.batch ? at::cat(keys) : empty_kv, d.batch ? at::cat(values) : empty_kv, a.softmax_scale,
                     a.mask, a.mapping, a.num_xcds, VarlenArgs{cu_q, cu_k_t, d.seqlen_q, longest}};
  const auto [out, lse] = fwd_cpu(args, std::nullopt);
  return {out.view({d.batch, d.seqlen_q, d.num_q_heads, d.head_dim}),
          lse.view({d.num_q_heads, d.batch, d.seqlen_q}).permute({1, 0, 2}).contiguous()};
}

DecodeResult decode_cpu(const DecodeArgs& a) {
  const DecodeDims d = check_decode(a);
  check_decode_values(a, d);
#if defined(CFA_EMULATE)
  // The MI300X's 304 compute units size the split heuristic.
  if (emulated_fwd_takes(a.q) && cache_layout_ok(a.k_cache) && cache_layout_ok(a.v_cache))
    return decode_with_kernels(a, KernelFamily::kCdna3, detect_num_xcds(a.q.device()), 304, nullptr);
#endif
  return decode_on_cpu(a, d);
}

}  // namespace

TORCH_LIBRARY_IMPL(chiplet_fa, CPU, m) { m.impl("fwd_kvcache", &DecodeEntry<decode_cpu>::fwd_kvcache); }

}  // namespace chiplet_fa
