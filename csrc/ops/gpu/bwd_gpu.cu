// CUDA / HIP implementation of chiplet_fa::bwd: a thin layer from tensors to BwdParams and the
// kernel family the device runs.
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "mapping/topology.h"
#include "ops/bwd_api.h"
#include "ops/fwd_api.h"
#include "ops/gpu/binding_common.h"
#include "ops/gpu/kernel_family.h"
#include "ops/gpu/launch_kernels.h"

namespace chiplet_fa {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> bwd_gpu(
    const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& out, const at::Tensor& softmax_lse, std::optional<double> softmax_scale,
    bool causal, std::string mapping, int64_t num_xcds, bool deterministic) {
  const c10::DeviceGuard guard(q.device());
  const BwdArgs args{dout, q, k, v, out, softmax_lse, softmax_scale, causal, mapping, num_xcds,
                     deterministic};
  BwdTensors t;
  const KernelFamily family = kernel_family(q.device());
  const KernelGeometry g = geometry(family);
  BwdParams p = prepare_bwd(args, g.bwd_dq_block_m, g.bwd_block_n, g.bwd_row_pad, detect_num_xcds(q.device()), t);
  const DType dtype = dtype_of(q);
  TORCH_CHECK_VALUE(dtype == DType::kFloat16 || dtype == DType::kBFloat16,
                    "chiplet_fa.bwd: GPU kernels take float16 or bfloat16 tensors, got ",
                    q.scalar_type(), " (float32/float64 run on the CPU path)");
  TORCH_CHECK_VALUE(q.size(3) <= 128, "chiplet_fa.bwd: the GPU backward supports head_dim up to "
                    "128, got ", q.size(3));
  if (q.numel() == 0 || k.numel() == 0) {  // no query or no key: every gradient is zero
    t.dk.zero_();
    t.dv.zero_();
    return {at::zeros_like(q), t.dk, t.dv};
  }
  TORCH_CHECK_VALUE(grid_size(p.grid_shape()) <= INT32_MAX && grid_size(p.kv_grid_shape()) <= INT32_MAX,
                    "chiplet_fa.bwd: the workgroup grids must fit a 1-D grid (< 2^31)");

  const int64_t D = q.size(3), d8 = (D + 7) / 8 * 8;
  const at::Tensor qk = kernel_layout(q, d8), kk = kernel_layout(k, d8), vk = kernel_layout(v, d8);
  const at::Tensor ok = kernel_layout(out, d8), dok = kernel_layout(dout, d8);
  const bool padded = d8 != D;
  const at::Tensor dk = padded ? at::empty({k.size(0), k.size(1), k.size(2), d8}, k.options()) : t.dk;
  const at::Tensor dv = padded ? at::empty({v.size(0), v.size(1), v.size(2), d8}, v.options()) : t.dv;
  const at::Tensor dq_accum = padded ? at::zeros({q.size(0), q.size(1), q.size(2), d8},
                                                 q.options().dtype(at::kFloat))
                                     : t.dq_accum;
  const at::Tensor lse_log2 = at::empty_like(t.softmax_d);
  p.lse_log2 = lse_log2.data_ptr<float>();
  point_at(p, qk, kk, vk, ok);
  point_grads_at(p, dok, dk, dv, dq_accum);
  p.head_dim = int32_t(d8);
  TORCH_CHECK(launch_kernels(family, dtype, causal, p, current_stream()), "chiplet_fa.bwd: no ",
              q.scalar_type(), " ", family_name(family), " kernel for head_dim ", D,
              " in this build (rebuild with CHIPLET_FA_DTYPES / CHIPLET_FA_HDIMS covering it)");
  check_launch("chiplet_fa.bwd");
  if (!padded) return {t.dq_accum.to(q.scalar_type()), t.dk, t.dv};
  t.dk.copy_(dk.narrow(3, 0, D));
  t.dv.copy_(dv.narrow(3, 0, D));
  return {dq_accum.narrow(3, 0, D).to(q.scalar_type()), t.dk, t.dv};
}

}  // namespace

TORCH_LIBRARY_IMPL(chiplet_fa, CUDA, m) { m.impl("bwd", &bwd_gpu); }

}  // namespace chiplet_fa
