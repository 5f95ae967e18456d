// The CPU backend of chiplet_fa::fwd_kvcache and its registration: the appends and rotary embedding
// as loops over the tensors' rows, then each sequence's visible keys gathered from the cache
// (contiguous or paged) into a packed batch that the CPU forward (fwd_cpu) attends to. One pass a
// sequence: num_splits only shapes the GPU kernels' work. In an emulated build float16/bfloat16
// calls run the CDNA3 decoding kernels instead.
#include <algorithm>
#include <cstring>
#include <vector>

#include <torch/csrc/stable/library.h>

#include "cpu/cpu_backend.h"
#include "ops/decode_entry.h"
#if defined(CFA_EMULATE)
#include "mapping/topology.h"
#include "ops/decode_binding.h"
#include "ops/emulated/emulated_kernels.h"
#endif

namespace chiplet_fa {
namespace {

// f(T{}) for the element type of a float tensor (check_decode admitted these four).
template <typename F>
void with_element_type(ScalarType t, const F& f) {
  switch (t) {
    case ScalarType::Half: return f(Half{});
    case ScalarType::BFloat16: return f(BFloat16{});
    case ScalarType::Float: return f(float{});
    default: return f(double{});
  }
}

// One head's row x rotated by the angles whose cos/sin rows are given (rotary_dim / 2 each) into
// out, in float (double for float64) as the kernels do; the columns past rotary_dim are copied.
template <typename T>
void rotate_row(const T* x, const T* cos, const T* sin, int64_t half, int64_t dim, bool interleaved, T* out) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  for (int64_t j = 0; j < half; ++j) {
    const int64_t i1 = interleaved ? 2 * j : j, i2 = interleaved ? 2 * j + 1 : j + half;
    const Acc x1 = Acc(x[i1]), x2 = Acc(x[i2]), c = Acc(cos[j]), s = Acc(sin[j]);
    out[i1] = T(x1 * c - x2 * s);
    out[i2] = T(x2 * c + x1 * s);
  }
  std::copy(x + 2 * half, x + dim, out + 2 * half);
}

// Where a sequence's rows and heads live in a 4-D tensor of element type T (last dimension contiguous).
template <typename T>
struct Rows {
  T* base;
  int64_t s0, s1, s2;
  explicit Rows(const Tensor& t)
      : base(static_cast<T*>(t.data_ptr())), s0(t.stride(0)), s1(t.stride(1)), s2(t.stride(2)) {}
  T* at(int64_t i0, int64_t i1, int64_t h) const { return base + i0 * s0 + i1 * s1 + h * s2; }
};

// The cache slot (entry, row) of key `pos` of sequence b.
std::pair<int64_t, int64_t> cache_slot(const DecodeArgs& a, const DecodeDims& d, int64_t b, int64_t slot,
                                       int64_t pos) {
  if (!a.paged()) return {slot, pos};
  const int32_t* pages = a.block_table->const_data_ptr<int32_t>() + b * a.block_table->stride(0);
  return {pages[pos / d.cache_rows], pos % d.cache_rows};
}

// The rotary tables' rows (seqlen_ro, rotary_dim / 2), one a position.
template <typename T>
struct RotaryTables {
  const T *cos, *sin;
  int64_t cos_row, sin_row;
  const T* cos_at(int64_t pos) const { return cos + pos * cos_row; }
  const T* sin_at(int64_t pos) const { return sin + pos * sin_row; }
};

// Appends k, v (rotated k when rotary) at cache_seqlens, rotates q into q_rot ((B * N_q, H_q, D),
// when rotary) and gathers each sequence's visible keys into k_packed, v_packed ((T_k, H_kv, D),
// cu_k their offsets).
template <typename T>
void append_and_gather(const DecodeArgs& a, const DecodeDims& d, const std::vector<int32_t>& cu_k, const Tensor& q_rot,
                       const Tensor& k_packed, const Tensor& v_packed) {
  const bool per_token = a.mask.causal || a.mask.window_left >= 0 || a.mask.window_right >= 0;
  const int64_t D = d.head_dim, half = d.rotary_dim / 2;
  const Rows<T> k_cache(a.k_cache), v_cache(a.v_cache), q(a.q);
  RotaryTables<T> ro{};
  if (d.rotary_dim > 0)
    ro = {a.rotary_cos->const_data_ptr<T>(), a.rotary_sin->const_data_ptr<T>(), a.rotary_cos->stride(0),
          a.rotary_sin->stride(0)};
  for (int64_t b = 0; b < d.batch; ++b) {
    const int64_t cached = host_value(a.cache_seqlens, b, d.capacity), slot = host_value(a.cache_batch_idx, b, b);
    const int64_t begin = host_value(a.cache_leftpad, b, 0);
    for (int64_t t = 0; a.k && t < d.seqlen_new; ++t) {
      const auto [entry, row] = cache_slot(a, d, b, slot, cached + t);
      const Rows<T> k(*a.k), v(*a.v);
      for (int64_t h = 0; h < d.num_kv_heads; ++h) {
        if (d.rotary_dim > 0)
          rotate_row(k.at(b, t, h), ro.cos_at(cached + t), ro.sin_at(cached + t), half, D, a.rotary_interleaved,
                     k_cache.at(entry, row, h));
        else
          std::copy(k.at(b, t, h), k.at(b, t, h) + D, k_cache.at(entry, row, h));
        std::copy(v.at(b, t, h), v.at(b, t, h) + D, v_cache.at(entry, row, h));
      }
    }
    for (int64_t i = 0; d.rotary_dim > 0 && i < d.seqlen_q; ++i) {
      const int64_t pos = per_token ? cached + i : cached;
      T* out = static_cast<T*>(q_rot.data_ptr()) + (b * d.seqlen_q + i) * d.num_q_heads * D;
      for (int64_t h = 0; h < d.num_q_heads; ++h)
        rotate_row(q.at(b, i, h), ro.cos_at(pos), ro.sin_at(pos), half, D, a.rotary_interleaved, out + h * D);
    }
    T* k_out = static_cast<T*>(k_packed.data_ptr()) + int64_t(cu_k[b]) * d.num_kv_heads * D;
    T* v_out = static_cast<T*>(v_packed.data_ptr()) + int64_t(cu_k[b]) * d.num_kv_heads * D;
    for (int64_t pos = begin; pos < cu_k[b + 1] - cu_k[b] + begin; ++pos) {
      const auto [entry, row] = cache_slot(a, d, b, slot, pos);
      for (int64_t h = 0; h < d.num_kv_heads; ++h, k_out += D, v_out += D) {
        std::copy(k_cache.at(entry, row, h), k_cache.at(entry, row, h) + D, k_out);
        std::copy(v_cache.at(entry, row, h), v_cache.at(entry, row, h) + D, v_out);
      }
    }
  }
}

DecodeResult decode_on_cpu(const DecodeArgs& a, const DecodeDims& d) {
  std::vector<int32_t> cu_k{0};
  for (int64_t b = 0; b < d.batch; ++b) {
    const int64_t cached = host_value(a.cache_seqlens, b, d.capacity), begin = host_value(a.cache_leftpad, b, 0);
    const int64_t end = a.cache_seqlens ? cached + d.seqlen_new : cached;
    cu_k.push_back(cu_k.back() + int32_t(end - begin));
  }
  const int64_t total_q = d.batch * d.seqlen_q;
  const Tensor k_packed = empty_on(a.q, {cu_k.back(), d.num_kv_heads, d.head_dim}, a.q.scalar_type());
  const Tensor v_packed = empty_on(a.q, {cu_k.back(), d.num_kv_heads, d.head_dim}, a.q.scalar_type());
  const Tensor q = d.rotary_dim > 0 ? empty_on(a.q, {total_q, d.num_q_heads, d.head_dim}, a.q.scalar_type())
                                    : torch::stable::reshape(a.q, {total_q, d.num_q_heads, d.head_dim});
  with_element_type(a.q.scalar_type(),
                    [&](auto t) { append_and_gather<decltype(t)>(a, d, cu_k, q, k_packed, v_packed); });
  Tensor cu_q = empty_on(a.q, {d.batch + 1}, ScalarType::Int), cu_k_t = empty_on(a.q, {d.batch + 1}, ScalarType::Int);
  for (int64_t b = 0; b <= d.batch; ++b) {
    cu_q.mutable_data_ptr<int32_t>()[b] = int32_t(b * d.seqlen_q);
    cu_k_t.mutable_data_ptr<int32_t>()[b] = cu_k[b];
  }
  int32_t longest = 0;
  for (int64_t b = 0; b < d.batch; ++b) longest = std::max(longest, cu_k[b + 1] - cu_k[b]);
  const FwdArgs args{q, k_packed, v_packed, a.softmax_scale, a.mask, a.mapping, a.num_xcds,
                     VarlenArgs{cu_q, cu_k_t, d.seqlen_q, longest}};
  const auto [out, lse] = fwd_cpu(args, std::nullopt);
  // lse (H_q, B * N_q) as (B, H_q, N_q)
  const Tensor lse_bhn = torch::stable::transpose(torch::stable::view(lse, {d.num_q_heads, d.batch, d.seqlen_q}), 0, 1);
  return {torch::stable::view(out, {d.batch, d.seqlen_q, d.num_q_heads, d.head_dim}),
          torch::stable::contiguous(lse_bhn)};
}

DecodeResult decode_cpu(const DecodeArgs& a) {
  const DecodeDims d = check_decode(a);
  check_decode_values(a, d);
#if defined(CFA_EMULATE)
  // The MI300X's 304 compute units size the split heuristic.
  if (emulated_fwd_takes(a.q) && cache_layout_ok(a.k_cache) && cache_layout_ok(a.v_cache))
    return decode_with_kernels(a, KernelFamily::kCdna3, kCpuXcds, 304, nullptr);
#endif
  return decode_on_cpu(a, d);
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(chiplet_fa, CPU, m) {
  m.impl("fwd_kvcache", TORCH_BOX(&DecodeEntry<decode_cpu>::fwd_kvcache));
}

}  // namespace chiplet_fa
