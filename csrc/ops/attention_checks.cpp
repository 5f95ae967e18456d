#include "ops/attention_checks.h"

#include <cmath>

#include "mapping/topology.h"

namespace chiplet_fa {
namespace {

constexpr int64_t kMaxLength = int64_t(1) << 29;  // window arithmetic (row + offset + right) stays in int32

void check_dtype(const char* op, const Tensor& q) {
  const auto t = q.scalar_type();
  check_value(t == ScalarType::Half || t == ScalarType::BFloat16 || t == ScalarType::Float || t == ScalarType::Double,
              op, ": q must be float16, bfloat16, float32 or float64, got ", t);
}

// A last dimension of size <= 1, or an empty tensor, has no stride to respect (torch calls such a
// tensor contiguous whatever the stride, so .contiguous() would not change it).
void check_last_dim(const char* op, const Tensor& t, const char* name) {
  check_value(t.numel() == 0 || t.size(-1) <= 1 || t.stride(-1) == 1, op, ": ", name,
              " must have a contiguous last dimension (stride(-1) == 1), got stride ",
              t.stride(-1), "; call .contiguous() first");
}

void check_tensor(const char* op, const Tensor& t, const char* name, const Tensor& q, bool packed) {
  check_value(t.dim() == (packed ? 3 : 4), op, ": ", name, " must be ",
              packed ? "3-D (total_tokens, num_heads, head_dim)" : "4-D (batch, seqlen, num_heads, head_dim)",
              ", got ", t.dim(), "-D");
  check_value(t.scalar_type() == q.scalar_type(), op, ": ", name, " has dtype ",
              t.scalar_type(), " but q has ", q.scalar_type(),
              "; q, k and v must share one dtype");
  check_value(t.device() == q.device(), op, ": ", name, " is on ", t.device(),
              " but q is on ", q.device(), "; q, k and v must be on one device");
  check_last_dim(op, t, name);
}

// cu_seqlens: int32, 1-D, batch + 1 entries, q's device, contiguous; on the CPU its values too.
void check_cu_seqlens(const char* op, const Tensor& cu, const char* name, int64_t batch, int64_t total,
                      int64_t max_seqlen, const char* max_name, const Tensor& q) {
  check_value(cu.scalar_type() == ScalarType::Int && cu.dim() == 1, op, ": ", name,
              " must be a 1-D int32 tensor, got ", cu.dim(), "-D ", cu.scalar_type());
  check_value(cu.size(0) == batch + 1, op, ": ", name, " must have batch + 1 = ", batch + 1,
              " entries like cu_seqlens_q, got ", cu.size(0));
  check_value(cu.device() == q.device(), op, ": ", name, " is on ", cu.device(), " but q is on ",
              q.device());
  check_value(cu.is_contiguous(), op, ": ", name, " must be contiguous");
  check_value(max_seqlen >= 0 && max_seqlen < kMaxLength, op, ": ", max_name, " must be in 0..2^29, got ",
              max_seqlen);
  if (!cu.is_cpu()) return;
  const int32_t* c = cu.mutable_data_ptr<int32_t>();
  check_value(c[0] == 0 && c[batch] == total, op, ": ", name, " must start at 0 and end at the ", total,
              " rows of its tensor, got ", c[0], " and ", c[batch]);
  for (int64_t b = 0; b < batch; ++b)
    check_value(c[b + 1] >= c[b] && c[b + 1] - c[b] <= max_seqlen, op, ": ", name,
                " must be non-decreasing with no sequence longer than ", max_name, " = ", max_seqlen,
                "; sequence ", b, " has length ", c[b + 1] - c[b]);
}

}  // namespace

AttentionDims check_qkv(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                        const std::optional<VarlenArgs>& varlen) {
  const bool packed = varlen.has_value();
  check_dtype(op, q);
  check_tensor(op, q, "q", q, packed);
  check_tensor(op, k, "k", q, packed);
  check_tensor(op, v, "v", q, packed);
  const int64_t rows = packed ? 0 : 1;  // dim of the sequence (dense) / tokens (packed)
  AttentionDims d{};
  d.packed = packed;
  d.num_q_heads = q.size(rows + 1);
  d.num_kv_heads = k.size(rows + 1);
  d.head_dim = q.size(rows + 2);
  if (packed) {
    d.batch = varlen->cu_seqlens_q.dim() == 1 ? varlen->cu_seqlens_q.size(0) - 1 : 0;
    d.total_q = q.size(0);
    d.total_k = k.size(0);
    d.seqlen_q = varlen->max_seqlen_q;
    d.seqlen_k = varlen->max_seqlen_k;
    check_value(d.batch >= 0 && d.batch <= INT32_MAX, op,
                ": cu_seqlens_q must have batch + 1 entries with batch in 0..2^31 - 1, got ", d.batch + 1);
    check_value(v.size(0) == d.total_k && v.size(1) == d.num_kv_heads, op, ": v must have shape (",
                d.total_k, ", ", d.num_kv_heads, ", D) like k, got ", v.sizes());
    check_cu_seqlens(op, varlen->cu_seqlens_q, "cu_seqlens_q", d.batch, d.total_q, d.seqlen_q, "max_seqlen_q", q);
    check_cu_seqlens(op, varlen->cu_seqlens_k, "cu_seqlens_k", d.batch, d.total_k, d.seqlen_k, "max_seqlen_k", q);
  } else {
    d.batch = q.size(0);
    d.seqlen_q = q.size(1);
    d.seqlen_k = k.size(1);
    d.total_q = d.batch * d.seqlen_q;
    d.total_k = d.batch * d.seqlen_k;
    check_value(k.size(0) == d.batch && v.size(0) == d.batch, op, ": k and v must have batch ", d.batch,
                " like q, got ", k.size(0), " and ", v.size(0));
    check_value(v.size(1) == d.seqlen_k && v.size(2) == d.num_kv_heads, op, ": v must have shape (",
                d.batch, ", ", d.seqlen_k, ", ", d.num_kv_heads, ", D) like k, got ", v.sizes());
    check_value(d.seqlen_q < kMaxLength && d.seqlen_k < kMaxLength && d.batch <= INT32_MAX, op,
                ": batch must fit in int32 and sequence lengths stay below 2^29");
  }
  check_value(k.size(-1) == d.head_dim && v.size(-1) == d.head_dim, op, ": head dims differ: q has ",
              d.head_dim, ", k has ", k.size(-1), ", v has ", v.size(-1));
  check_value(d.head_dim >= 1 && d.head_dim <= 256, op, ": head_dim must be in 1..256, got ", d.head_dim);
  check_value(d.num_kv_heads >= 1 && d.num_q_heads % d.num_kv_heads == 0, op, ": num_heads of q (",
              d.num_q_heads, ") must be a positive multiple of num_heads of k/v (", d.num_kv_heads, ")");
  check_value(d.num_q_heads <= INT32_MAX, op, ": num_heads of q must be at most 2^31 - 1, got ",
              d.num_q_heads);
  check_value(d.total_q <= INT32_MAX && d.total_k <= INT32_MAX, op, ": total tokens must fit in int32");
  return d;
}

void check_options(const char* op, std::optional<double> softmax_scale, int64_t num_xcds,
                   const MaskArgs& mask, const AttentionDims& d, const Tensor& q) {
  check_value(num_xcds == -1 || (num_xcds >= 1 && num_xcds <= kMaxXcds), op,
              ": num_xcds must be -1 (detect) or in 1..", kMaxXcds, ", got ", num_xcds);
  if (softmax_scale) {
    check_value(std::isfinite(*softmax_scale), op, ": softmax_scale must be finite, got ",
                *softmax_scale);
  }
  check_value(mask.window_left >= -1 && mask.window_right >= -1, op,
              ": window_size entries must be >= -1 (-1: unbounded), got (", mask.window_left, ", ",
              mask.window_right, ")");
  check_value(std::isfinite(mask.softcap) && mask.softcap >= 0, op,
              ": softcap must be finite and >= 0 (0: none), got ", mask.softcap);
  if (mask.alibi_slopes) {
    const Tensor& s = *mask.alibi_slopes;
    check_value(s.scalar_type() == ScalarType::Float, op, ": alibi_slopes must be float32, got ", s.scalar_type());
    check_value((s.dim() == 1 && s.size(0) == d.num_q_heads) ||
                    (s.dim() == 2 && s.size(0) == d.batch && s.size(1) == d.num_q_heads),
                op, ": alibi_slopes must have shape (", d.num_q_heads, ",) or (", d.batch, ", ",
                d.num_q_heads, "), got ", s.sizes());
    check_value(s.device() == q.device(), op, ": alibi_slopes is on ", s.device(), " but q is on ",
                q.device());
    check_last_dim(op, s, "alibi_slopes");
  }
}

void check_like(const char* op, const Tensor& t, const char* name, const Tensor& ref,
                const char* ref_name) {
  check_value(t.sizes() == ref.sizes(), op, ": ", name, " must have the shape of ",
              ref_name, " ", ref.sizes(), ", got ", t.sizes());
  check_value(t.scalar_type() == ref.scalar_type(), op, ": ", name, " has dtype ",
              t.scalar_type(), " but ", ref_name, " has ", ref.scalar_type());
  check_value(t.device() == ref.device(), op, ": ", name, " is on ", t.device(), " but ",
              ref_name, " is on ", ref.device());
  check_last_dim(op, t, name);
}

}  // namespace chiplet_fa
