#include "ops/fwd_api.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/resolve_mapping.h"

namespace chiplet_fa {

DType dtype_of(const Tensor& t) { return dtype_of(t.scalar_type()); }

DType dtype_of(ScalarType t) {
  switch (t) {
    case ScalarType::Half: return DType::kFloat16;
    case ScalarType::BFloat16: return DType::kBFloat16;
    case ScalarType::Float: return DType::kFloat32;
    case ScalarType::Double: return DType::kFloat64;
    default:
      throw std::invalid_argument(message("chiplet_fa: unsupported dtype ", t,
                                          " (expected float16, bfloat16, float32 or float64)"));
  }
}

ScalarType lse_dtype(const Tensor& q) {
  return q.scalar_type() == ScalarType::Double ? ScalarType::Double : ScalarType::Float;
}

bool finish_without_kernel(const FwdParams& p, Tensor& out, Tensor& softmax_lse) {
  if (out.numel() == 0) return true;
  if (p.total_k > 0) return false;
  torch::stable::zero_(out);
  torch::stable::fill_(softmax_lse, -std::numeric_limits<double>::infinity());
  return true;
}

Strides strides_of(const Tensor& t) {
  return t.dim() == 3 ? Strides{0, t.stride(0), t.stride(1)} : Strides{t.stride(0), t.stride(1), t.stride(2)};
}

Tensor padded_like(const Tensor& t, int64_t last_dim, std::optional<ScalarType> dtype) {
  std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
  shape.back() = last_dim;
  return empty_on(t, shape, dtype.value_or(t.scalar_type()));
}

void point_at(FwdParams& p, const Tensor& q, const Tensor& k, const Tensor& v,
              const Tensor& out) {
  p.q = q.data_ptr();
  p.k = k.data_ptr();
  p.v = v.data_ptr();
  p.out = out.data_ptr();
  const Strides sq = strides_of(q), sk = strides_of(k), sv = strides_of(v), so = strides_of(out);
  p.q_batch_stride = sq.batch; p.q_row_stride = sq.row; p.q_head_stride = sq.head;
  p.k_batch_stride = sk.batch; p.k_row_stride = sk.row; p.k_head_stride = sk.head;
  p.v_batch_stride = sv.batch; p.v_row_stride = sv.row; p.v_head_stride = sv.head;
  p.o_batch_stride = so.batch; p.o_row_stride = so.row; p.o_head_stride = so.head;
}

FwdParams prepare_fwd(const FwdArgs& a, int block_m, int detected_xcds, Tensor& out,
                      Tensor& softmax_lse, const OptTensor& given_out) {
  const AttentionDims d = check_qkv(a.op(), a.q, a.k, a.v, a.varlen);
  check_options(a.op(), a.softmax_scale, a.num_xcds, a.mask, d, a.q);
  if (given_out) {
    check_like(a.op(), *given_out, "out", a.q, "q");
    out = *given_out;
  } else {
    out = empty_on(a.q, a.q.sizes(), a.q.scalar_type());
  }
  const auto lse_shape = d.packed ? std::vector<int64_t>{d.num_q_heads, d.total_q}
                                  : std::vector<int64_t>{d.batch, d.num_q_heads, d.seqlen_q};
  softmax_lse = empty_on(a.q, lse_shape, lse_dtype(a.q));
  return fwd_params(a, d, out, softmax_lse, block_m, detected_xcds);
}

FwdParams fwd_params(const FwdArgs& a, const AttentionDims& d, const Tensor& out,
                     const Tensor& softmax_lse, int block_m, int detected_xcds) {
  const int num_xcds = a.num_xcds == -1 ? detected_xcds : int(a.num_xcds);
  FwdParams p{};
  point_at(p, a.q, a.k, a.v, out);
  p.softmax_lse = softmax_lse.data_ptr();
  p.batch = int32_t(d.batch);
  p.seqlen_q = int32_t(d.seqlen_q);
  p.seqlen_k = int32_t(d.seqlen_k);
  p.num_q_heads = int32_t(d.num_q_heads);
  p.num_kv_heads = int32_t(d.num_kv_heads);
  p.head_dim = int32_t(d.head_dim);
  p.total_q = d.total_q;
  p.total_k = d.total_k;
  p.lse_batch_stride = d.packed ? 0 : d.num_q_heads * d.seqlen_q;
  p.lse_head_stride = d.packed ? d.total_q : d.seqlen_q;
  if (d.packed) {
    p.cu_seqlens_q = a.varlen->cu_seqlens_q.mutable_data_ptr<int32_t>();
    p.cu_seqlens_k = a.varlen->cu_seqlens_k.mutable_data_ptr<int32_t>();
  }
  p.softmax_scale = a.softmax_scale ? *a.softmax_scale : 1.0 / std::sqrt(double(p.head_dim));

  set_mask(p, a.mask, d.seqlen_q + d.seqlen_k);

  locality::AttnShape shape{d.batch, d.num_q_heads, d.num_kv_heads, d.seqlen_q, d.seqlen_k, d.head_dim};
  shape.elem_bytes = int32_t(a.q.element_size());
  shape.causal = a.mask.causal;
  shape.block_m = block_m;
  // The auto decision sees the lengths the host knows: a packed batch's exact lengths when its
  // cu_seqlens are CPU tensors, else batch sequences of the mean length (no device-to-host copy).
  const bool host_lengths = d.packed && a.varlen->cu_seqlens_q.is_cpu() && a.varlen->cu_seqlens_k.is_cpu();
  if (d.packed)
    locality::describe_packed(shape, host_lengths ? p.cu_seqlens_q : nullptr, host_lengths ? p.cu_seqlens_k : nullptr,
                              d.total_q, d.total_k);
  p.mapping = resolve_mapping(a.mapping, num_xcds, shape);
  p.num_xcds = num_xcds;
  p.block_m = block_m;
  p.section_rows = 1;
  return p;
}

}  // namespace chiplet_fa
