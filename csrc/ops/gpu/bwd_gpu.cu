// CUDA / HIP implementation of chiplet_fa::bwd and bwd_varlen: a thin layer from tensors to
// BwdParams and the kernel family the device runs. (The CUDA dispatch key also serves ROCm.)
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "mapping/topology.h"
#include "ops/gpu/binding_common.h"
#include "ops/gpu/kernel_family.h"
#include "ops/gpu/launch_kernels.h"
#include "ops/op_entry.h"

namespace chiplet_fa {

FwdResult fwd_gpu(const FwdArgs& args, const std::optional<at::Tensor>& out);

BwdResult bwd_gpu(const BwdArgs& a) {
  check_qkv(a.op(), a.q, a.k, a.v, a.varlen);  // a mix with CPU tensors lands here: name it first
  const c10::DeviceGuard guard(a.q.device());
  const KernelFamily family = kernel_family(a.q.device());
  const KernelGeometry g = geometry(family);
  BwdTensors t;
  BwdParams p = prepare_bwd(a, g.bwd_dq_block_m, g.bwd_block_n, g.bwd_row_pad, detect_num_xcds(a.q.device()), t);
  const DType dtype = check_gpu_dtype(a.op(), a.q);
  const int64_t D = a.q.size(-1), d8 = (D + 7) / 8 * 8;
  TORCH_CHECK_VALUE(D <= 128, a.op(), ": the GPU backward supports head_dim up to 128, got ", D);
  if (p.total_q == 0 || p.total_k == 0) {  // no query or no key: every gradient is zero
    t.dk.zero_();
    t.dv.zero_();
    return {at::zeros_like(a.q), t.dk, t.dv};
  }
  const at::Tensor q_grid = ragged_grid(p.cu_seqlens_q, p.batch, a.q), k_grid = ragged_grid(p.cu_seqlens_k, p.batch, a.q);
  p.block_offsets = q_grid.defined() ? q_grid.data_ptr<int32_t>() : nullptr;
  p.kv_block_offsets = k_grid.defined() ? k_grid.data_ptr<int32_t>() : nullptr;
  TORCH_CHECK_VALUE(p.launch_size(p.grid_shape(), p.total_q, g.bwd_dq_block_m) <= INT32_MAX &&
                        p.launch_size(p.kv_grid_shape(), p.total_k, g.bwd_block_n) <= INT32_MAX,
                    a.op(), ": the workgroup grids must fit a 1-D grid (< 2^31)");

  const at::Tensor qk = kernel_layout(a.q, d8), kk = kernel_layout(a.k, d8), vk = kernel_layout(a.v, d8);
  const at::Tensor ok = kernel_layout(a.out, d8), dok = kernel_layout(a.dout, d8);
  const bool padded = d8 != D;
  const at::Tensor dk = padded ? padded_like(a.k, d8) : t.dk;
  const at::Tensor dv = padded ? padded_like(a.v, d8) : t.dv;
  const at::Tensor dq_accum = padded ? at::zeros_like(padded_like(t.dq_accum, d8)) : t.dq_accum;
  const at::Tensor lse_log2 = at::empty_like(t.softmax_d);
  p.lse_log2 = lse_log2.data_ptr<float>();
  point_at(p, qk, kk, vk, ok);
  point_grads_at(p, dok, dk, dv, dq_accum);
  p.head_dim = int32_t(d8);
  TORCH_CHECK(launch_kernels(family, dtype, p, current_stream()), a.op(), ": no ", a.q.scalar_type(), " ",
              family_name(family), " kernel for head_dim ", D,
              " in this build (rebuild with CHIPLET_FA_DTYPES / CHIPLET_FA_HDIMS covering it)");
  check_launch(a.op());
  if (!padded) return {t.dq_accum.to(a.q.scalar_type()), t.dk, t.dv};
  t.dk.copy_(dk.narrow(-1, 0, D));
  t.dv.copy_(dv.narrow(-1, 0, D));
  return {dq_accum.narrow(-1, 0, D).to(a.q.scalar_type()), t.dk, t.dv};
}

TORCH_LIBRARY_IMPL(chiplet_fa, CUDA, m) { OpEntry<fwd_gpu, bwd_gpu>::register_ops(m); }

}  // namespace chiplet_fa
