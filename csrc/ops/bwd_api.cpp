#include "ops/bwd_api.h"

namespace chiplet_fa {

void point_grads_at(BwdParams& p, const Tensor& dout, const Tensor& dk,
                    const Tensor& dv, const Tensor& dq_accum) {
  p.dout = dout.data_ptr();
  p.dk = dk.data_ptr();
  p.dv = dv.data_ptr();
  p.dq_accum = dq_accum.data_ptr();
  const Strides sd = strides_of(dout), sk = strides_of(dk), sv = strides_of(dv);
  p.do_batch_stride = sd.batch; p.do_row_stride = sd.row; p.do_head_stride = sd.head;
  p.dk_batch_stride = sk.batch; p.dk_row_stride = sk.row; p.dk_head_stride = sk.head;
  p.dv_batch_stride = sv.batch; p.dv_row_stride = sv.row; p.dv_head_stride = sv.head;
}

BwdParams prepare_bwd(const BwdArgs& a, int block_m, int block_n, int row_pad, int detected_xcds,
                      BwdTensors& t, bool fixed_point_dq, int64_t dq_cols) {
  const char* op = a.op();
  const AttentionDims d = check_qkv(op, a.q, a.k, a.v, a.varlen);
  check_options(op, a.softmax_scale, a.num_xcds, a.mask, d, a.q);
  check_like(op, a.dout, "dout", a.q, "q");
  check_like(op, a.out, "out", a.q, "q");
  const Tensor& lse = a.softmax_lse;
  const auto lse_shape = d.packed ? std::vector<int64_t>{d.num_q_heads, d.total_q}
                                  : std::vector<int64_t>{d.batch, d.num_q_heads, d.seqlen_q};
  check_value(lse.scalar_type() == lse_dtype(a.q), op, ": softmax_lse must be ",
              lse_dtype(a.q) == ScalarType::Double ? "float64 (q is float64)" : "float32",
              " as the forward returns it, got ", lse.scalar_type());
  check_value(lse.sizes() == Sizes(lse_shape), op, ": softmax_lse must have shape (",
              joined(lse_shape), ") ", d.packed ? "(num_heads, total_q)" : "(batch, num_heads, seqlen_q)",
              " as the forward returns it, got ", lse.sizes());
  check_value(lse.device() == a.q.device(), op, ": softmax_lse is on ", lse.device(),
              " but q is on ", a.q.device());
  check_value(lse.is_contiguous(), op, ": softmax_lse must be contiguous, as the forward returns it");

  const auto acc = a.q.scalar_type() == ScalarType::Double ? ScalarType::Double : ScalarType::Float;
  t.dk = empty_on(a.k, a.k.sizes(), a.k.scalar_type());
  t.dv = empty_on(a.v, a.v.sizes(), a.v.scalar_type());
  t.dq_accum = padded_like(a.q, dq_cols > 0 ? dq_cols : a.q.size(-1), fixed_point_dq ? ScalarType::Int : acc);
  // Rows per (batch, head) (dense) or per head (packed), each sequence padded to whole blocks.
  const int64_t stats_rows = d.packed ? row_pad * ((d.total_q + row_pad - 1) / row_pad + d.batch)
                                      : (d.seqlen_q + row_pad - 1) / row_pad * row_pad;
  t.softmax_d = d.packed ? empty_on(a.q, {d.num_q_heads, stats_rows}, acc)
                         : empty_on(a.q, {d.batch, d.num_q_heads, stats_rows}, acc);

  BwdParams p{};
  static_cast<FwdParams&>(p) = fwd_params(a.fwd(), d, a.out, lse, block_m, detected_xcds);
  point_grads_at(p, a.dout, t.dk, t.dv, t.dq_accum);
  p.softmax_d = t.softmax_d.data_ptr();
  p.stats_pad = row_pad;
  p.stats_rows = stats_rows;
  p.block_n = block_n;
  p.deterministic = a.deterministic;
  return p;
}

}  // namespace chiplet_fa
