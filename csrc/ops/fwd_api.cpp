#include "ops/fwd_api.h"

#include <cmath>
#include <limits>

#include <ATen/ATen.h>

#include "ops/attention_checks.h"
#include "ops/resolve_mapping.h"

namespace chiplet_fa {

DType dtype_of(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kHalf: return DType::kFloat16;
    case at::kBFloat16: return DType::kBFloat16;
    case at::kFloat: return DType::kFloat32;
    case at::kDouble: return DType::kFloat64;
    default:
      TORCH_CHECK_VALUE(false, "chiplet_fa: unsupported dtype ", t.scalar_type(),
                        " (expected float16, bfloat16, float32 or float64)");
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

FwdParams prepare_fwd(const FwdArgs& a, int block_m, int detected_xcds, at::Tensor& out,
                      at::Tensor& softmax_lse) {
  const AttentionDims d = check_qkv("chiplet_fa.fwd", a.q, a.k, a.v);
  check_options("chiplet_fa.fwd", a.softmax_scale, a.num_xcds);
  out = at::empty({d.batch, d.seqlen_q, d.num_q_heads, d.head_dim}, a.q.options());
  softmax_lse = at::empty({d.batch, d.num_q_heads, d.seqlen_q}, a.q.options().dtype(at::kFloat));
  return fwd_params(a, out, softmax_lse, block_m, detected_xcds);
}

FwdParams fwd_params(const FwdArgs& a, const at::Tensor& out, const at::Tensor& softmax_lse,
                     int block_m, int detected_xcds) {
  const at::Tensor &q = a.q, &k = a.k, &v = a.v;
  const int num_xcds = a.num_xcds == -1 ? detected_xcds : int(a.num_xcds);
  FwdParams p{};
  point_at(p, q, k, v, out);
  p.softmax_lse = softmax_lse.data_ptr<float>();
  p.batch = int32_t(q.size(0));
  p.seqlen_q = int32_t(q.size(1));
  p.seqlen_k = int32_t(k.size(1));
  p.num_q_heads = int32_t(q.size(2));
  p.num_kv_heads = int32_t(k.size(2));
  p.head_dim = int32_t(q.size(3));
  p.softmax_scale = a.softmax_scale ? *a.softmax_scale : 1.0 / std::sqrt(double(p.head_dim));
  p.causal = a.causal;
  locality::AttnShape shape{q.size(0), q.size(2), k.size(2), q.size(1), k.size(1), q.size(3)};
  shape.elem_bytes = int32_t(q.element_size());
  shape.causal = a.causal;
  shape.block_m = block_m;
  p.mapping = resolve_mapping(a.mapping, num_xcds, shape);
  p.num_xcds = num_xcds;
  p.block_m = block_m;
  return p;
}

}  // namespace chiplet_fa
