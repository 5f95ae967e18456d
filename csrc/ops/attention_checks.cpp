#include "ops/attention_checks.h"

#include <cmath>

#include <c10/util/Exception.h>

namespace chiplet_fa {
namespace {

void check_dtype(const char* op, const at::Tensor& q) {
  const auto t = q.scalar_type();
  TORCH_CHECK_VALUE(t == at::kHalf || t == at::kBFloat16 || t == at::kFloat || t == at::kDouble,
                    op, ": q must be float16, bfloat16, float32 or float64, got ", t);
}

void check_last_dim(const char* op, const at::Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.size(-1) == 0 || t.stride(-1) == 1, op, ": ", name,
                    " must have a contiguous last dimension (stride(-1) == 1), got stride ",
                    t.stride(-1), "; call .contiguous() first");
}

void check_tensor(const char* op, const at::Tensor& t, const char* name, const at::Tensor& q) {
  TORCH_CHECK_VALUE(t.dim() == 4, op, ": ", name,
                    " must be 4-D (batch, seqlen, num_heads, head_dim), got ", t.dim(), "-D");
  TORCH_CHECK_VALUE(t.scalar_type() == q.scalar_type(), op, ": ", name, " has dtype ",
                    t.scalar_type(), " but q has ", q.scalar_type(),
                    "; q, k and v must share one dtype");
  TORCH_CHECK_VALUE(t.device() == q.device(), op, ": ", name, " is on ", t.device(),
                    " but q is on ", q.device(), "; q, k and v must be on one device");
  check_last_dim(op, t, name);
}

}  // namespace

AttentionDims check_qkv(const char* op, const at::Tensor& q, const at::Tensor& k,
                        const at::Tensor& v) {
  check_dtype(op, q);
  check_tensor(op, q, "q", q);
  check_tensor(op, k, "k", q);
  check_tensor(op, v, "v", q);
  const int64_t B = q.size(0), Nq = q.size(1), Hq = q.size(2), D = q.size(3);
  const int64_t Nk = k.size(1), Hkv = k.size(2);
  TORCH_CHECK_VALUE(k.size(0) == B && v.size(0) == B, op, ": k and v must have batch ", B,
                    " like q, got ", k.size(0), " and ", v.size(0));
  TORCH_CHECK_VALUE(v.size(1) == Nk && v.size(2) == Hkv, op, ": v must have shape (", B, ", ",
                    Nk, ", ", Hkv, ", D) like k, got ", v.sizes());
  TORCH_CHECK_VALUE(k.size(3) == D && v.size(3) == D, op, ": head dims differ: q has ", D,
                    ", k has ", k.size(3), ", v has ", v.size(3));
  TORCH_CHECK_VALUE(D >= 1 && D <= 256, op, ": head_dim must be in 1..256, got ", D);
  TORCH_CHECK_VALUE(Hkv >= 1 && Hq % Hkv == 0, op, ": num_heads of q (", Hq,
                    ") must be a positive multiple of num_heads of k/v (", Hkv, ")");
  TORCH_CHECK_VALUE(B <= INT32_MAX && Nq <= INT32_MAX && Nk <= INT32_MAX, op,
                    ": batch and sequence lengths must fit in int32");
  return AttentionDims{B, Nq, Nk, Hq, Hkv, D};
}

void check_options(const char* op, std::optional<double> softmax_scale, int64_t num_xcds) {
  TORCH_CHECK_VALUE(num_xcds == -1 || num_xcds >= 1, op,
                    ": num_xcds must be -1 (detect) or >= 1, got ", num_xcds);
  if (softmax_scale) {
    TORCH_CHECK_VALUE(std::isfinite(*softmax_scale), op, ": softmax_scale must be finite, got ",
                      *softmax_scale);
  }
}

void check_like(const char* op, const at::Tensor& t, const char* name, const at::Tensor& ref,
                const char* ref_name) {
  TORCH_CHECK_VALUE(t.sizes() == ref.sizes(), op, ": ", name, " must have the shape of ",
                    ref_name, " ", ref.sizes(), ", got ", t.sizes());
  TORCH_CHECK_VALUE(t.scalar_type() == ref.scalar_type(), op, ": ", name, " has dtype ",
                    t.scalar_type(), " but ", ref_name, " has ", ref.scalar_type());
  TORCH_CHECK_VALUE(t.device() == ref.device(), op, ": ", name, " is on ", t.device(), " but ",
                    ref_name, " is on ", ref.device());
  check_last_dim(op, t, name);
}

}  // namespace chiplet_fa
