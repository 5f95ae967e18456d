// The kernel half of the fwd and bwd bindings, shared by the GPU bindings (ops/gpu/) and the
// emulated CDNA3 path of a CPU build (ops/emulated/): from the op's arguments to params for the
// family's geometry, the head dim padded to a multiple of 8 (the kernels copy 16-byte pieces),
// the family's kernels launched on `stream`, and the results copied back. Compiled as CUDA, HIP
// or (emulated) host C++: every family's launchers are declared for all three.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "arch/dtype.h"
#include "kernels/launch.h"
#include "ops/gpu/launch_kernels.h"
#include "ops/op_entry.h"
#include "platform.h"

namespace chiplet_fa {

// The kernels copy 16-byte pieces: base pointers and every stride but the last dimension's must
// be multiples of 8 elements and the head dim a multiple of 8; a broadcast (stride 0 over more
// than one entry) is not handed to sm90's TMA tensor maps either. Other inputs get a zero-padded
// copy.
inline Tensor kernel_layout(const Tensor& t, int64_t head_dim8) {
  Tensor x = t.size(-1) == head_dim8 ? t : torch::stable::pad(t, {0, head_dim8 - t.size(-1)});
  bool aligned = reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) aligned &= x.stride(d) % 8 == 0 && (x.stride(d) != 0 || x.size(d) == 1);
  return aligned ? x : torch::stable::contiguous(x);
}

// The first `head_dim` columns of a padded tensor (a view).
inline Tensor narrowed(Tensor t, int64_t head_dim) { return torch::stable::narrow(t, -1, 0, head_dim); }

// The device buffer a packed batch's ragged grid is written to by the launch code (batch + 1
// int32), undefined for a dense batch.
inline Tensor ragged_grid(const int32_t* cu_seqlens, int32_t batch, const Tensor& like) {
  return cu_seqlens ? empty_on(like, {int64_t(batch) + 1}, ScalarType::Int) : Tensor();
}

inline DType check_kernel_dtype(const char* op, const Tensor& q) {
  const DType dtype = dtype_of(q);
  check_value(dtype == DType::kFloat16 || dtype == DType::kBFloat16, op,
              ": GPU kernels take float16 or bfloat16 tensors, got ", q.scalar_type(),
              " (float32/float64 run on the CPU path)");
  return dtype;
}

// A launch failure reported by the GPU runtime, as a RuntimeError naming the op (the emulator
// raises its errors from the launch itself).
inline void check_launch(const char* op) {
#if defined(CFA_CUDA) || defined(CFA_HIP)
  const cfaError_t err = cfaGetLastError();
  check_runtime(err == cfaSuccess, op, ": kernel launch failed: ", cfaGetErrorString(err));
#else
  (void)op;
#endif
}

// The head dim of the instantiation a call of head dim d8 runs, for the tile sizes it fixes: d8
// itself where the build has none that covers it (check_launched then reports the call).
// (The dtype is checked elsewhere: any but bfloat16 is sized as float16.)
inline int tile_head_dim(KernelFamily family, DType dtype, int64_t d8, bool backward) {
  const DType built = dtype == DType::kBFloat16 ? DType::kBFloat16 : DType::kFloat16;
  return std::max(built_head_dim(family, built, int(d8), backward), int(d8));
}

// q's dtype for tile_head_dim, before the checks that name a wrong one.
inline DType tile_dtype(const Tensor& q) {
  return q.scalar_type() == ScalarType::BFloat16 ? DType::kBFloat16 : DType::kFloat16;
}

// Query rows per forward tile of `family`'s kernel for a call of this dtype and head dim: what the
// grid and mapping="auto" are sized with.
inline int fwd_rows_for(KernelFamily family, DType dtype, int64_t head_dim) {
  const int64_t d8 = (head_dim + 7) / 8 * 8;
  return fwd_block_m(family, tile_head_dim(family, dtype, d8, false));
}

inline void check_launched(bool launched, const char* op, const Tensor& q, KernelFamily family) {
  check_runtime(launched, op, ": no ", q.scalar_type(), " ", family_name(family), " kernel for head_dim ", q.size(-1),
                " in this build (rebuild with CHIPLET_FA_DTYPES / CHIPLET_FA_HDIMS covering it)");
  check_launch(op);
}

// FwdParams::scratch from the caching allocator: each request a tensor held until this object
// goes, after the launch (the allocator orders its reuse after the work queued on the stream).
struct ScratchTensors {
  Tensor like;  // on the launch's device
  std::vector<Tensor> held;
  static void* get(void* owner, int64_t bytes) {
    auto& self = *static_cast<ScratchTensors*>(owner);
    self.held.push_back(empty_on(self.like, {bytes}, ScalarType::Byte));
    return self.held.back().data_ptr();
  }
};

// The forward (dense or packed) on `family`'s kernels, with num_xcds=-1 meaning `detected_xcds`;
// writes into given_out when there is one.
inline FwdResult fwd_with_kernels(const FwdArgs& a, const OptTensor& given_out, KernelFamily family,
                                  int detected_xcds, cfaStream_t stream) {
  const int64_t D = a.q.size(-1), d8 = (D + 7) / 8 * 8;
  const int block_m = fwd_rows_for(family, tile_dtype(a.q), D);
  Tensor out, lse;
  FwdParams p = prepare_fwd(a, block_m, detected_xcds, out, lse, given_out);
  const DType dtype = check_kernel_dtype(a.op(), a.q);
  if (finish_without_kernel(p, out, lse)) return {out, lse};
  const Tensor offsets = ragged_grid(p.cu_seqlens_q, p.batch, a.q);
  p.block_offsets = offsets.defined() ? offsets.mutable_data_ptr<int32_t>() : nullptr;
  // A persistent forward's work queues: a counter per L2 domain at most (the launch zeroes them).
  const Tensor counters = geometry(family).fwd_persistent
                                  ? empty_on(a.q, {std::max<int64_t>(1, p.num_xcds)}, ScalarType::Int)
                                  : Tensor();
  p.tile_counters = counters.defined() ? counters.mutable_data_ptr<int32_t>() : nullptr;
  check_value(p.launch_size(p.grid_shape(), p.total_q, block_m) <= INT32_MAX, a.op(),
              ": batch * num_heads * ceil(seqlen_q / ", block_m, ") must fit a 1-D grid (< 2^31)");

  const Tensor qk = kernel_layout(a.q, d8), kk = kernel_layout(a.k, d8), vk = kernel_layout(a.v, d8);
  const Tensor ok = d8 == D && kernel_layout(out, d8).data_ptr() == out.data_ptr() ? out : padded_like(out, d8);
  point_at(p, qk, kk, vk, ok);
  p.head_dim = int32_t(d8);
  ScratchTensors scratch{a.q, {}};
  p.scratch = {&scratch, &ScratchTensors::get};
  check_launched(launch_kernels(family, dtype, p, stream), a.op(), a.q, family);
  if (ok.data_ptr() != out.data_ptr()) copy_into(out, narrowed(ok, D));
  return {out, lse};
}

// The tensors a fixed-point dQ (the deterministic sm90 backward) adds, kept alive over the launch:
// max |K| and max |V|, from which the preprocess sets each row's unit (BwdParams::dq_scale), the
// units, and dQ in the input's dtype, which the conversion kernel writes from the int32 sums.
struct FixedPointDq {
  Tensor kv_absmax, dq_scale, dq;
};

inline FixedPointDq bind_fixed_point_dq(BwdParams& p, const BwdArgs& a, const Tensor& softmax_d,
                                        const Tensor& dq_accum) {
  FixedPointDq f{empty_on(a.q, {2}, ScalarType::Float), torch::stable::empty_like(softmax_d),
                 empty_on(a.q, dq_accum.sizes(), a.q.scalar_type())};
  copy_into(torch::stable::select(f.kv_absmax, 0, 0), abs_max(a.k));
  copy_into(torch::stable::select(f.kv_absmax, 0, 1), abs_max(a.v));
  p.kv_absmax = f.kv_absmax.mutable_data_ptr<float>();
  p.dq_scale = f.dq_scale.mutable_data_ptr<float>();
  p.dq_out = f.dq.data_ptr();
  return f;
}

// Under a mask a KV head's workgroups start at different query blocks (their diagonals) and drift
// apart over the group's query heads, so together they stream all of the group's Q, dO and dQ rows;
// where those exceed 25 MB (the part of the H200's 60 MB L2 beyond which the group's walk was
// measured losing; GQA 64/8 at N = 8K, D = 128: 64 MB, 63% L2 hits against 97% without groups;
// docs/sm90_backward.md, "Large GQA groups under a mask"), sm90's atomic backward gives each query
// head of a KV block a workgroup of its own (BwdParams::kv_split), whose partial dK, dV go into fp32
// accumulators. Deterministic mode (fp32 sums in any order are not reproducible) gives each workgroup
// an fp32 slice of its own, summed after the kernel: G slices of dK and dV, four times q's bytes in bf16.
constexpr int64_t kSplitGroupBytes = int64_t(25) << 20;
// p: whole groups (kv_split 1), its head dim the kernels' (padded).
inline int32_t kv_split_for(const BwdParams& p, KernelFamily family, int elem_bytes) {
  const int32_t G = p.group_size();
  const bool split = family == KernelFamily::kSm90 && p.windowed && G > 1 &&
                     p.kv_row_bytes(elem_bytes) > kSplitGroupBytes;
  return split ? G : 1;
}

// Where a split group's workgroups put their partial dK or dV (kv_split > 1): one zeroed fp32
// accumulator they add into, or (deterministic) one fp32 slice per split, the first of which
// the params point at (BwdParams::kv_partial_stride apart).
inline Tensor split_partials(const Tensor& grad, int32_t kv_split, bool deterministic) {
  if (!deterministic) return zeros_on(grad, grad.sizes(), ScalarType::Float);
  std::vector<int64_t> sizes{kv_split};
  sizes.insert(sizes.end(), grad.sizes().begin(), grad.sizes().end());
  return empty_on(grad, sizes, ScalarType::Float);  // every element is written by its split's workgroups
}

// grad from split_partials' tensor: the accumulator, or the slices' sum (a reduction without
// atomics: the same bits whatever order the workgroups ran in).
inline void take_partials(const Tensor& grad, const Tensor& partials, bool deterministic) {
  copy_into(grad, deterministic ? torch::stable::sum(partials, Sizes{0}) : partials);
}

// The backward (dense or packed) on `family`'s kernels, with num_xcds=-1 meaning `detected_xcds`.
inline BwdResult bwd_with_kernels(const BwdArgs& a, KernelFamily family, int detected_xcds, cfaStream_t stream) {
  const int64_t D = a.q.size(-1), d8 = (D + 7) / 8 * 8;
  const KernelGeometry g = geometry(family);
  // Keys per workgroup: those of the instantiation that runs (a reduced build may lack the
  // smallest head dim that covers D).
  const int built = tile_head_dim(family, tile_dtype(a.q), d8, true);
  const int block_n = bwd_block_n(family, built), dq_block_m = bwd_dq_block_m(family, built);
  // Deterministic sm90: dQ in fixed point (BwdParams::dq_scale), whatever the mapping.
  const bool fixed = a.deterministic && family == KernelFamily::kSm90;
  BwdTensors t;
  BwdParams p = prepare_bwd(a, dq_block_m, block_n, g.bwd_row_pad, detected_xcds, t, fixed, d8);
  const DType dtype = check_kernel_dtype(a.op(), a.q);
  if (p.total_q == 0 || p.total_k == 0) {  // no query or no key: every gradient is zero
    torch::stable::zero_(t.dk);
    torch::stable::zero_(t.dv);
    return {zeros_on(a.q, a.q.sizes(), a.q.scalar_type()), t.dk, t.dv};
  }
  const Tensor q_grid = ragged_grid(p.cu_seqlens_q, p.batch, a.q), k_grid = ragged_grid(p.cu_seqlens_k, p.batch, a.q);
  p.block_offsets = q_grid.defined() ? q_grid.mutable_data_ptr<int32_t>() : nullptr;
  p.kv_block_offsets = k_grid.defined() ? k_grid.mutable_data_ptr<int32_t>() : nullptr;
  p.head_dim = int32_t(d8);
  p.kv_split = kv_split_for(p, family, int(a.q.element_size()));
  check_value(p.launch_size(p.grid_shape(), p.total_q, dq_block_m) <= INT32_MAX &&
                  p.launch_size(p.kv_grid_shape(), p.total_k, block_n) <= INT32_MAX &&
                  p.row_pass_blocks() <= INT32_MAX,
              a.op(), ": the workgroup grids must fit a 1-D grid (< 2^31)");

  const Tensor qk = kernel_layout(a.q, d8), kk = kernel_layout(a.k, d8), vk = kernel_layout(a.v, d8);
  const Tensor ok = kernel_layout(a.out, d8), dok = kernel_layout(a.dout, d8);
  const bool padded = d8 != D;
  const Tensor dk = padded ? padded_like(a.k, d8) : t.dk;
  const Tensor dv = padded ? padded_like(a.v, d8) : t.dv;
  Tensor& dq_accum = t.dq_accum;  // d8 columns already
  if (p.cu_seqlens_q) torch::stable::zero_(dq_accum);  // dense: the preprocess clears it (kernels/bwd_kernel.h)
  const Tensor lse_log2 = torch::stable::empty_like(t.softmax_d);
  p.lse_log2 = lse_log2.mutable_data_ptr<float>();
  point_at(p, qk, kk, vk, ok);
  // A split group's workgroups put their partial dK, dV in fp32 (kv_split_for); deterministic
  // ones in slices, of which the params point at the first.
  const bool split = p.kv_split > 1, slices = split && fixed;
  const Tensor dk_part = split ? split_partials(dk, p.kv_split, fixed) : dk;
  const Tensor dv_part = split ? split_partials(dv, p.kv_split, fixed) : dv;
  const auto first = [&](const Tensor& part) { return slices ? torch::stable::select(part, 0, 0) : part; };
  point_grads_at(p, dok, first(dk_part), first(dv_part), dq_accum);
  check_runtime(!slices || dk_part.stride(0) == dv_part.stride(0), "chiplet_fa: dK and dV slices laid out alike");
  p.kv_partial_stride = slices ? dk_part.stride(0) : 0;
  const FixedPointDq fixed_dq = fixed ? bind_fixed_point_dq(p, a, t.softmax_d, dq_accum) : FixedPointDq{};
  check_launched(launch_kernels(family, dtype, p, stream), a.op(), a.q, family);
  if (split) {
    take_partials(dk, dk_part, fixed);
    take_partials(dv, dv_part, fixed);
  }
  // dQ in the input's dtype (fixed point: the conversion kernel wrote it).
  const Tensor dq = fixed ? fixed_dq.dq : dq_accum;
  const ScalarType dtype_q = a.q.scalar_type();
  if (!padded) return {torch::stable::to(dq, dtype_q), t.dk, t.dv};
  copy_into(t.dk, narrowed(dk, D));
  copy_into(t.dv, narrowed(dv, D));
  return {torch::stable::contiguous(torch::stable::to(narrowed(dq, D), dtype_q)), t.dk, t.dv};
}

}  // namespace chiplet_fa
