#include "ops/bwd_api.h"

#include <ATen/ATen.h>

#include "ops/attention_checks.h"
#include "ops/fwd_api.h"

namespace chiplet_fa {

void point_grads_at(BwdParams& p, const at::Tensor& dout, const at::Tensor& dk,
                    const at::Tensor& dv, const at::Tensor& dq_accum) {
  p.dout = dout.data_ptr();
  p.dk = dk.data_ptr();
  p.dv = dv.data_ptr();
  p.dq_accum = dq_accum.data_ptr();
  p.do_batch_stride = dout.stride(0); p.do_row_stride = dout.stride(1); p.do_head_stride = dout.stride(2);
  p.dk_batch_stride = dk.stride(0); p.dk_row_stride = dk.stride(1); p.dk_head_stride = dk.stride(2);
  p.dv_batch_stride = dv.stride(0); p.dv_row_stride = dv.stride(1); p.dv_head_stride = dv.stride(2);
}

BwdParams prepare_bwd(const BwdArgs& a, int block_m, int block_n, int row_pad, int detected_xcds,
                      BwdTensors& t) {
  constexpr const char* op = "chiplet_fa.bwd";
  const AttentionDims d = check_qkv(op, a.q, a.k, a.v);
  check_options(op, a.softmax_scale, a.num_xcds);
  check_like(op, a.dout, "dout", a.q, "q");
  check_like(op, a.out, "out", a.q, "q");
  const at::Tensor& lse = a.softmax_lse;
  TORCH_CHECK_VALUE(lse.scalar_type() == at::kFloat, op, ": softmax_lse must be float32, got ",
                    lse.scalar_type());
  TORCH_CHECK_VALUE(lse.dim() == 3 && lse.size(0) == d.batch && lse.size(1) == d.num_q_heads &&
                        lse.size(2) == d.seqlen_q,
                    op, ": softmax_lse must have shape (", d.batch, ", ", d.num_q_heads, ", ",
                    d.seqlen_q, ") (batch, num_heads, seqlen_q), got ", lse.sizes());
  TORCH_CHECK_VALUE(lse.device() == a.q.device(), op, ": softmax_lse is on ", lse.device(),
                    " but q is on ", a.q.device());
  TORCH_CHECK_VALUE(lse.is_contiguous(), op,
                    ": softmax_lse must be contiguous, as chiplet_fa.fwd returns it");

  const auto acc = a.q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  t.dk = at::empty(a.k.sizes(), a.k.options());
  t.dv = at::empty(a.v.sizes(), a.v.options());
  t.dq_accum = at::zeros(a.q.sizes(), a.q.options().dtype(acc));
  const int64_t rows_rounded = (d.seqlen_q + row_pad - 1) / row_pad * row_pad;
  t.softmax_d = at::empty({d.batch, d.num_q_heads, rows_rounded}, a.q.options().dtype(acc));

  BwdParams p{};
  static_cast<FwdParams&>(p) = fwd_params(
      FwdArgs{a.q, a.k, a.v, a.softmax_scale, a.causal, a.mapping, a.num_xcds}, a.out, lse,
      block_m, detected_xcds);
  point_grads_at(p, a.dout, t.dk, t.dv, t.dq_accum);
  p.softmax_d = t.softmax_d.data_ptr();
  p.seqlen_q_rounded = int32_t(rows_rounded);
  p.block_n = block_n;
  p.deterministic = a.deterministic;
  return p;
}

}  // namespace chiplet_fa
