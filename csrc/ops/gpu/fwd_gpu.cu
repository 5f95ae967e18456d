// CUDA / HIP implementation of chiplet_fa::fwd and fwd_varlen: a thin layer from tensors to
// FwdParams and the kernel family the device runs. (The CUDA dispatch key also serves ROCm.)
#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "mapping/topology.h"
#include "ops/gpu/binding_common.h"
#include "ops/gpu/kernel_family.h"
#include "ops/gpu/launch_kernels.h"
#include "ops/op_entry.h"

namespace chiplet_fa {

FwdResult fwd_gpu(const FwdArgs& a, const std::optional<at::Tensor>& given_out) {
  check_qkv(a.op(), a.q, a.k, a.v, a.varlen);  // a mix with CPU tensors lands here: name it first
  const c10::DeviceGuard guard(a.q.device());
  const KernelFamily family = kernel_family(a.q.device());
  const int block_m = geometry(family).fwd_block_m;
  at::Tensor out, lse;
  FwdParams p = prepare_fwd(a, block_m, detect_num_xcds(a.q.device()), out, lse, given_out);
  const DType dtype = check_gpu_dtype(a.op(), a.q);
  if (finish_without_kernel(p, out, lse)) return {out, lse};
  const at::Tensor offsets = ragged_grid(p.cu_seqlens_q, p.batch, a.q);
  p.block_offsets = offsets.defined() ? offsets.data_ptr<int32_t>() : nullptr;
  TORCH_CHECK_VALUE(p.launch_size(p.grid_shape(), p.total_q, block_m) <= INT32_MAX, a.op(),
                    ": batch * num_heads * ceil(seqlen_q / ", block_m, ") must fit a 1-D grid (< 2^31)");

  const int64_t D = a.q.size(-1), d8 = (D + 7) / 8 * 8;
  const at::Tensor qk = kernel_layout(a.q, d8), kk = kernel_layout(a.k, d8), vk = kernel_layout(a.v, d8);
  const at::Tensor ok = d8 == D && kernel_layout(out, d8).data_ptr() == out.data_ptr() ? out : padded_like(out, d8);
  point_at(p, qk, kk, vk, ok);
  p.head_dim = int32_t(d8);
  TORCH_CHECK(launch_kernels(family, dtype, p, current_stream()), a.op(), ": no ", a.q.scalar_type(), " ",
              family_name(family), " kernel for head_dim ", D,
              " in this build (rebuild with CHIPLET_FA_DTYPES / CHIPLET_FA_HDIMS covering it)");
  check_launch(a.op());
  if (ok.data_ptr() != out.data_ptr()) out.copy_(ok.narrow(-1, 0, D));
  return {out, lse};
}

}  // namespace chiplet_fa
