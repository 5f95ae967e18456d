#include "ops/decode_api.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "ops/fwd_api.h"
#include "ops/resolve_mapping.h"

namespace chiplet_fa {
namespace {

constexpr const char* kOp = DecodeArgs::kOp;
constexpr int64_t kMaxLength = int64_t(1) << 29;

void check_float(const Tensor& t, const char* name, const Tensor& q, int64_t dim) {
  check_value(t.dim() == dim, kOp, ": ", name, " must be ", dim, "-D, got ", t.dim(), "-D");
  check_value(t.scalar_type() == q.scalar_type(), kOp, ": ", name, " has dtype ", t.scalar_type(),
              " but q has ", q.scalar_type());
  check_value(t.device() == q.device(), kOp, ": ", name, " is on ", t.device(), " but q is on ", q.device());
  check_value(t.numel() == 0 || t.size(-1) <= 1 || t.stride(-1) == 1, kOp, ": ", name,
              " must have a contiguous last dimension (stride(-1) == 1), got stride ", t.stride(-1),
              "; call .contiguous() first");
}

void check_index(const OptTensor& t, const char* name, const Tensor& q, int64_t batch,
                 int64_t dim) {
  if (!t) return;
  check_value(t->scalar_type() == ScalarType::Int && t->dim() == dim, kOp, ": ", name, " must be a ", dim,
              "-D int32 tensor, got ", t->dim(), "-D ", t->scalar_type());
  check_value(t->size(0) == batch, kOp, ": ", name, " must have batch = ", batch, " rows like q, got ",
              t->size(0));
  check_value(t->device() == q.device(), kOp, ": ", name, " is on ", t->device(), " but q is on ", q.device());
  check_value(t->numel() == 0 || t->stride(-1) == 1, kOp, ": ", name, " must have a contiguous last dimension");
}

void check_new_keys(const DecodeArgs& a, DecodeDims& d) {
  check_value(a.k.has_value() == a.v.has_value(), kOp, ": k and v must be given together");
  if (!a.k) return;
  check_value(a.cache_seqlens.has_value(), kOp, ": k and v are appended at cache_seqlens, which must be given");
  check_float(*a.k, "k", a.q, 4);
  check_float(*a.v, "v", a.q, 4);
  const std::vector<int64_t> want{d.batch, a.k->size(1), d.num_kv_heads, d.head_dim};
  check_value(a.k->sizes() == Sizes(want), kOp, ": k must have shape (", d.batch,
              ", seqlen_new, ", d.num_kv_heads, ", ", d.head_dim, "), got ", a.k->sizes());
  check_value(a.v->sizes() == a.k->sizes(), kOp, ": v must have k's shape ", a.k->sizes(), ", got ",
              a.v->sizes());
  d.seqlen_new = a.k->size(1);
  check_value(d.seqlen_new <= d.capacity, kOp, ": k has ", d.seqlen_new, " new keys but the cache holds ",
              d.capacity, " a sequence");
}

void check_rotary(const DecodeArgs& a, DecodeDims& d) {
  check_value(a.rotary_cos.has_value() == a.rotary_sin.has_value(), kOp,
              ": rotary_cos and rotary_sin must be given together");
  if (!a.rotary_cos) return;
  check_value(a.k.has_value(), kOp, ": rotary embedding applies to q and the new k: give k and v with rotary_cos");
  check_float(*a.rotary_cos, "rotary_cos", a.q, 2);
  check_float(*a.rotary_sin, "rotary_sin", a.q, 2);
  check_value(a.rotary_sin->sizes() == a.rotary_cos->sizes(), kOp, ": rotary_sin must have rotary_cos's shape ",
              a.rotary_cos->sizes(), ", got ", a.rotary_sin->sizes());
  d.seqlen_ro = a.rotary_cos->size(0);
  d.rotary_dim = 2 * a.rotary_cos->size(1);
  check_value(d.rotary_dim >= 2 && d.rotary_dim <= d.head_dim, kOp,
              ": rotary_cos must be (seqlen_ro, rotary_dim / 2) with rotary_dim in 2..head_dim = ",
              d.head_dim, ", got ", a.rotary_cos->sizes());
  check_value(d.seqlen_ro < (int64_t(1) << 31), kOp, ": rotary_cos has too many rows");
}

void check_cache(const DecodeArgs& a, DecodeDims& d) {
  check_float(a.k_cache, "k_cache", a.q, 4);
  check_float(a.v_cache, "v_cache", a.q, 4);
  check_value(a.v_cache.sizes() == a.k_cache.sizes(), kOp, ": v_cache must have k_cache's shape ",
              a.k_cache.sizes(), ", got ", a.v_cache.sizes());
  d.cache_entries = a.k_cache.size(0);
  d.cache_rows = a.k_cache.size(1);
  d.num_kv_heads = a.k_cache.size(2);
  check_value(a.k_cache.size(3) == d.head_dim, kOp, ": k_cache has head_dim ", a.k_cache.size(3),
              " but q has ", d.head_dim);
  check_value(d.num_kv_heads >= 1 && d.num_q_heads % d.num_kv_heads == 0, kOp, ": num_heads of q (",
              d.num_q_heads, ") must be a positive multiple of num_heads of k_cache (", d.num_kv_heads, ")");
  check_value(d.cache_entries <= INT32_MAX, kOp, ": k_cache's first dimension must fit in int32");
  if (!a.paged()) {
    d.capacity = d.cache_rows;
    check_value(a.cache_batch_idx || d.cache_entries >= d.batch, kOp, ": k_cache holds ", d.cache_entries,
                " sequences but q has batch ", d.batch, "; pass cache_batch_idx to pick them");
  } else {
    const int64_t page = d.cache_rows;
    check_value(page >= 1 && page <= 256 && (page & (page - 1)) == 0, kOp,
                ": a paged cache's page size (k_cache.size(1)) must be a power of two in 1..256, got ", page);
    check_value(!a.cache_batch_idx && !a.cache_leftpad, kOp,
                ": cache_batch_idx and cache_leftpad do not apply to a paged cache (block_table picks the pages)");
    check_index(a.block_table, "block_table", a.q, d.batch, 2);
    d.pages_per_seq = a.block_table->size(1);
    d.capacity = d.pages_per_seq * page;
  }
  check_value(d.capacity < (int64_t(1) << 31), kOp, ": a sequence's cache must hold fewer than 2^31 keys");
}

}  // namespace

DecodeDims check_decode(const DecodeArgs& a) {
  const auto t = a.q.scalar_type();
  check_value(t == ScalarType::Half || t == ScalarType::BFloat16 || t == ScalarType::Float || t == ScalarType::Double,
              kOp, ": q must be float16, bfloat16, float32 or float64, got ", t);
  check_float(a.q, "q", a.q, 4);
  DecodeDims d{};
  d.batch = a.q.size(0);
  d.seqlen_q = a.q.size(1);
  d.num_q_heads = a.q.size(2);
  d.head_dim = a.q.size(3);
  check_value(d.head_dim >= 1 && d.head_dim <= 256, kOp, ": head_dim must be in 1..256, got ", d.head_dim);
  check_value(d.batch <= INT32_MAX && d.seqlen_q < kMaxLength && d.num_q_heads <= INT32_MAX, kOp,
              ": batch and num_heads must fit in int32 and seqlen_q stay below 2^29");
  check_cache(a, d);
  check_index(a.cache_seqlens, "cache_seqlens", a.q, d.batch, 1);
  check_index(a.cache_batch_idx, "cache_batch_idx", a.q, d.batch, 1);
  check_index(a.cache_leftpad, "cache_leftpad", a.q, d.batch, 1);
  check_new_keys(a, d);
  check_rotary(a, d);
  check_value(a.num_splits >= 0 && a.num_splits <= 256, kOp,
              ": num_splits must be in 0..256 (0: chosen by a heuristic), got ", a.num_splits);
  const AttentionDims dims{d.batch, d.seqlen_q, d.capacity, d.num_q_heads, d.num_kv_heads, d.head_dim, 0, 0, false};
  check_options(kOp, a.softmax_scale, a.num_xcds, a.mask, dims, a.q);
  return d;
}

int64_t host_value(const OptTensor& t, int64_t b, int64_t fallback) {
  return t ? t->const_data_ptr<int32_t>()[b * t->stride(0)] : fallback;
}

void check_decode_values(const DecodeArgs& a, const DecodeDims& d) {
  for (int64_t b = 0; b < d.batch; ++b) {
    const int64_t cached = host_value(a.cache_seqlens, b, d.capacity), begin = host_value(a.cache_leftpad, b, 0);
    const int64_t slot = host_value(a.cache_batch_idx, b, b);
    check_value(cached >= 0 && cached + d.seqlen_new <= d.capacity, kOp, ": cache_seqlens[", b, "] = ",
                cached, " leaves no room in a cache of ", d.capacity, " keys for ", d.seqlen_new, " new ones");
    check_value(begin >= 0 && begin <= cached, kOp, ": cache_leftpad[", b, "] = ", begin,
                " must be in 0..cache_seqlens[", b, "] = ", cached);
    check_value(slot >= 0 && slot < d.cache_entries, kOp, ": cache_batch_idx[", b, "] = ", slot,
                " is not a batch entry of k_cache (", d.cache_entries, ")");
    if (a.paged()) {
      const int64_t used = (cached + d.seqlen_new + d.cache_rows - 1) / d.cache_rows;
      const int32_t* pages = a.block_table->const_data_ptr<int32_t>() + b * a.block_table->stride(0);
      check_value(std::all_of(pages, pages + used, [&](int32_t page) { return page >= 0 && page < d.cache_entries; }),
                  kOp, ": block_table[", b, "] names a page outside k_cache's ", d.cache_entries, " pages");
    }
    if (d.rotary_dim > 0) {
      const bool per_token = a.mask.causal || a.mask.window_left >= 0 || a.mask.window_right >= 0;
      const int64_t last = cached + std::max(d.seqlen_new - 1, per_token ? d.seqlen_q - 1 : int64_t(0));
      check_value(last < d.seqlen_ro, kOp, ": rotary_cos has ", d.seqlen_ro, " rows but sequence ", b,
                  " rotates position ", last);
    }
  }
}

DecodeParams decode_params(const DecodeArgs& a, const DecodeDims& d, int detected_xcds) {
  DecodeParams p{};
  p.q = a.q.data_ptr();
  p.k_cache = a.k_cache.data_ptr();
  p.v_cache = a.v_cache.data_ptr();
  p.q_batch_stride = a.q.stride(0); p.q_row_stride = a.q.stride(1); p.q_head_stride = a.q.stride(2);
  p.k_batch_stride = a.k_cache.stride(0); p.k_row_stride = a.k_cache.stride(1); p.k_head_stride = a.k_cache.stride(2);
  p.v_batch_stride = a.v_cache.stride(0); p.v_row_stride = a.v_cache.stride(1); p.v_head_stride = a.v_cache.stride(2);
  if (a.k) {
    p.k_new = a.k->data_ptr();
    p.v_new = a.v->data_ptr();
    p.knew_batch_stride = a.k->stride(0); p.knew_row_stride = a.k->stride(1); p.knew_head_stride = a.k->stride(2);
    p.vnew_batch_stride = a.v->stride(0); p.vnew_row_stride = a.v->stride(1); p.vnew_head_stride = a.v->stride(2);
  }
  if (a.rotary_cos) {
    p.rotary_cos = a.rotary_cos->data_ptr();
    p.rotary_sin = a.rotary_sin->data_ptr();
  }
  const auto ints = [](const OptTensor& t) { return t ? t->mutable_data_ptr<int32_t>() : nullptr; };
  p.cache_seqlens = ints(a.cache_seqlens);
  p.cache_batch_idx = ints(a.cache_batch_idx);
  p.cache_leftpad = ints(a.cache_leftpad);
  p.block_table = ints(a.block_table);
  p.block_table_stride = a.block_table ? a.block_table->stride(0) : 0;
  p.batch = int32_t(d.batch);
  p.seqlen_q = int32_t(d.seqlen_q);
  p.seqlen_new = int32_t(d.seqlen_new);
  p.num_q_heads = int32_t(d.num_q_heads);
  p.num_kv_heads = int32_t(d.num_kv_heads);
  p.head_dim = int32_t(d.head_dim);
  p.cache_entries = int32_t(d.cache_entries);
  p.cache_rows = int32_t(d.cache_rows);
  while (a.paged() && (int64_t(1) << p.page_shift) < d.cache_rows) ++p.page_shift;
  p.pages_per_seq = int32_t(d.pages_per_seq);
  p.rotary_dim = int32_t(d.rotary_dim);
  p.seqlen_ro = int32_t(d.seqlen_ro);
  p.rotary_interleaved = a.rotary_interleaved;
  const MaskArgs& m = a.mask;
  set_mask(p, m, INT32_MAX);
  p.rotary_q_per_token = p.windowed;
  p.softmax_scale = a.softmax_scale ? *a.softmax_scale : 1.0 / std::sqrt(double(d.head_dim));
  // ALiBi's slope is per query head, the tile's scores take one: one head a tile.
  p.heads_per_tile = m.alibi_slopes ? 1 : std::max<int32_t>(1, int32_t(d.num_q_heads / d.num_kv_heads));
  p.num_xcds = a.num_xcds == -1 ? detected_xcds : int32_t(a.num_xcds);
  // A group's row blocks re-read its keys, its splits read disjoint ones: the swizzled head-first
  // order keeps the re-reads in the group's L2 domain and costs the splits nothing (docs/decode.md).
  p.mapping = a.mapping == "auto" ? Mapping::kSwizzledHeadFirst : resolve_mapping(a.mapping, p.num_xcds, {});
  p.num_splits = 1;
  return p;
}

int decode_splits(const DecodeArgs& a, const DecodeDims& d, int64_t tiles, int units, int block_n) {
  if (a.num_splits > 0) return int(a.num_splits);
  if (tiles == 0 || tiles >= units) return 1;
  const int64_t most = std::max<int64_t>(1, d.capacity / (4 * int64_t(block_n)));
  return int(std::clamp<int64_t>((2 * int64_t(units) + tiles - 1) / tiles, 1, std::min<int64_t>(most, 128)));
}

}  // namespace chiplet_fa
