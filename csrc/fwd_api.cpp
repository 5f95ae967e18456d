#include "fwd_api.h"

#include <cmath>
#include <limits>

#include <ATen/ATen.h>

#include "mapping_names.h"

namespace chiplet_fa {

DType dtype_of(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kHalf: return DType::kFloat16;
    case at::kBFloat16: return DType::kBFloat16;
    case at::kFloat: return DType::kFloat32;
    case at::kDouble: return DType::kFloat64;
    default:
      TORCH_CHECK_VALUE(false, "chiplet_fa.fwd: q must be float16, bfloat16, float32 or float64, got ",
                        t.scalar_type());
  }
}

bool finish_without_kernel(const FwdParams& p, at::Tensor& out, at::Tensor& softmax_lse) {
  if (out.numel() == 0) return true;
  if (p.seqlen_k > 0) return false;
  out.zero_();
  softmax_lse.fill_(-std::numeric_limits<float>::infinity());
  return true;
}

void point_at(FwdParams& p, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
              const at::Tensor& out) {
  p.q = q.data_ptr();
  p.k = k.data_ptr();
  p.v = v.data_ptr();
  p.out = out.data_ptr();
  p.q_batch_stride = q.stride(0); p.q_row_stride = q.stride(1); p.q_head_stride = q.stride(2);
  p.k_batch_stride = k.stride(0); p.k_row_stride = k.stride(1); p.k_head_stride = k.stride(2);
  p.v_batch_stride = v.stride(0); p.v_row_stride = v.stride(1); p.v_head_stride = v.stride(2);
  p.o_batch_stride = out.stride(0); p.o_row_stride = out.stride(1); p.o_head_stride = out.stride(2);
}

namespace {

void check_tensor(const at::Tensor& t, const char* name, const at::Tensor& q) {
  TORCH_CHECK_VALUE(t.dim() == 4, "chiplet_fa.fwd: ", name,
                    " must be 4-D (batch, seqlen, num_heads, head_dim), got ", t.dim(), "-D");
  TORCH_CHECK_VALUE(t.scalar_type() == q.scalar_type(), "chiplet_fa.fwd: ", name,
                    " has dtype ", t.scalar_type(), " but q has ", q.scalar_type(),
                    "; q, k and v must share one dtype");
  TORCH_CHECK_VALUE(t.device() == q.device(), "chiplet_fa.fwd: ", name, " is on ", t.device(),
                    " but q is on ", q.device(), "; q, k and v must be on one device");
  TORCH_CHECK_VALUE(t.size(3) == 0 || t.stride(3) == 1, "chiplet_fa.fwd: ", name,
                    " must have a contiguous last dimension (stride(-1) == 1), got stride ",
                    t.stride(3), "; call .contiguous() first");
}

}  // namespace

FwdParams prepare_fwd(const FwdArgs& a, int block_m, int detected_xcds, at::Tensor& out,
                      at::Tensor& softmax_lse) {
  const at::Tensor &q = a.q, &k = a.k, &v = a.v;
  dtype_of(q);
  check_tensor(q, "q", q);
  check_tensor(k, "k", q);
  check_tensor(v, "v", q);
  const int64_t B = q.size(0), Nq = q.size(1), Hq = q.size(2), D = q.size(3);
  const int64_t Nk = k.size(1), Hkv = k.size(2);
  TORCH_CHECK_VALUE(k.size(0) == B && v.size(0) == B, "chiplet_fa.fwd: k and v must have batch ",
                    B, " like q, got ", k.size(0), " and ", v.size(0));
  TORCH_CHECK_VALUE(v.size(1) == Nk && v.size(2) == Hkv, "chiplet_fa.fwd: v must have shape (",
                    B, ", ", Nk, ", ", Hkv, ", D) like k, got ", v.sizes());
  TORCH_CHECK_VALUE(k.size(3) == D && v.size(3) == D, "chiplet_fa.fwd: head dims differ: q has ",
                    D, ", k has ", k.size(3), ", v has ", v.size(3));
  TORCH_CHECK_VALUE(D >= 1 && D <= 256, "chiplet_fa.fwd: head_dim must be in 1..256, got ", D);
  TORCH_CHECK_VALUE(Hkv >= 1 && Hq % Hkv == 0, "chiplet_fa.fwd: num_heads of q (", Hq,
                    ") must be a positive multiple of num_heads of k/v (", Hkv, ")");
  TORCH_CHECK_VALUE(a.num_xcds == -1 || a.num_xcds >= 1,
                    "chiplet_fa.fwd: num_xcds must be -1 (detect) or >= 1, got ", a.num_xcds);
  if (a.softmax_scale) {
    TORCH_CHECK_VALUE(std::isfinite(*a.softmax_scale), "chiplet_fa.fwd: softmax_scale must be finite, got ",
                      *a.softmax_scale);
  }
  TORCH_CHECK_VALUE(B <= INT32_MAX && Nq <= INT32_MAX && Nk <= INT32_MAX,
                    "chiplet_fa.fwd: batch and sequence lengths must fit in int32");
  const int num_xcds = a.num_xcds == -1 ? detected_xcds : int(a.num_xcds);
  locality::AttnShape shape{B, Hq, Hkv, Nq, Nk, D};
  shape.elem_bytes = int32_t(q.element_size());
  shape.causal = a.causal;
  shape.block_m = block_m;
  const Mapping mapping = resolve_mapping(a.mapping, num_xcds, shape);

  out = at::empty({B, Nq, Hq, D}, q.options());
  softmax_lse = at::empty({B, Hq, Nq}, q.options().dtype(at::kFloat));

  FwdParams p{};
  point_at(p, q, k, v, out);
  p.softmax_lse = softmax_lse.data_ptr<float>();
  p.batch = int32_t(B);
  p.seqlen_q = int32_t(Nq);
  p.seqlen_k = int32_t(Nk);
  p.num_q_heads = int32_t(Hq);
  p.num_kv_heads = int32_t(Hkv);
  p.head_dim = int32_t(D);
  p.softmax_scale = a.softmax_scale ? *a.softmax_scale : 1.0 / std::sqrt(double(D));
  p.causal = a.causal;
  p.mapping = mapping;
  p.num_xcds = num_xcds;
  p.block_m = block_m;
  return p;
}

}  // namespace chiplet_fa
