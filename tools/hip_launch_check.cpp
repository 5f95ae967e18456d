// Launch check of the HIP build (cmake -DCHIPLET_FA_BACKEND=hip -DCHIPLET_FA_HIP_LAUNCH_CHECK=ON: linked
// from the kernel objects _C holds; .ci/hip_build.sh builds and runs it). For every instantiation the build holds (build_config.h)
// it fills FwdParams / BwdParams for a small GQA problem under each kind of mask (none; causal;
// a sliding window with softcap and ALiBi) and calls launch_kernels, the dispatch
// the torch bindings use (ops/gpu/launch_kernels.h), which runs cdna3::run_fwd / run_bwd
// (kernels/launch_impl.h) and their kernel launches; then it asks the runtime how the launch went.
//
// Without a device (CI) every launch must fail with hipErrorNoDevice: the program says that the
// launch code is linked and reached the runtime, and exits 0. With a device the buffers are
// allocated and zeroed and every launch must complete (only that: the results are not checked,
// and this branch has never run, no AMD GPU being available). Any other outcome exits 1.
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "build_config.h"
#include "ops/gpu/launch_kernels.h"

namespace {

using namespace chiplet_fa;

// q/out (B, N_q, H_q, D), k/v (B, N_k, H_kv, D): GQA, N_q > N_k so that causal rows see no key.
constexpr int kBatch = 2, kSeqQ = 200, kSeqK = 160, kHeadsQ = 4, kHeadsKv = 2;

// Zeroed device buffers when there is a device; null pointers (never launched) when there is none.
struct Buffers {
  bool device;
  std::vector<void*> owned;
  hipError_t error = hipSuccess;
  void* get(size_t bytes) {
    void* p = nullptr;
    if (!device || error != hipSuccess) return p;
    if ((error = hipMalloc(&p, bytes)) == hipSuccess) {
      owned.push_back(p);
      error = hipMemset(p, 0, bytes);
    }
    return p;
  }
  ~Buffers() {
    for (void* p : owned) (void)hipFree(p);
  }
};

void set_strides(int64_t& batch, int64_t& row, int64_t& head, int rows, int heads, int d) {
  head = d;
  row = int64_t(heads) * d;
  batch = int64_t(rows) * row;
}

enum class Masks { kNone, kCausal, kWindowSoftcapAlibi };
constexpr Masks kAllMasks[] = {Masks::kNone, Masks::kCausal, Masks::kWindowSoftcapAlibi};
const char* mask_name(Masks m) {
  return m == Masks::kNone ? "none" : m == Masks::kCausal ? "causal" : "window+softcap+alibi";
}

// Window fields as the bindings set them (ops/fwd_api.cpp): an unbounded side is N_q + N_k.
void set_masks(BwdParams& p, Masks m, Buffers& buf) {
  const int32_t unbounded = kSeqQ + kSeqK;
  p.windowed = m != Masks::kNone;
  p.window_left = m == Masks::kWindowSoftcapAlibi ? 64 : unbounded;
  p.window_right = m == Masks::kNone ? unbounded : 0;
  if (m != Masks::kWindowSoftcapAlibi) return;
  p.softcap = 30.f;
  p.alibi_slopes = static_cast<const float*>(buf.get(size_t(kHeadsQ) * sizeof(float)));
  p.alibi_batch_stride = 0;
}

BwdParams make_params(int head_dim, Masks masks, bool backward, Buffers& buf) {
  const KernelGeometry g = geometry(KernelFamily::kCdna3);
  const size_t elem = 2;  // fp16 and bf16
  const size_t q_bytes = size_t(kBatch) * kSeqQ * kHeadsQ * head_dim, k_bytes = size_t(kBatch) * kSeqK * kHeadsKv * head_dim;
  BwdParams p{};
  p.batch = kBatch;
  p.seqlen_q = kSeqQ;
  p.seqlen_k = kSeqK;
  p.num_q_heads = kHeadsQ;
  p.num_kv_heads = kHeadsKv;
  p.head_dim = head_dim;
  p.softmax_scale = 1.0 / __builtin_sqrt(double(head_dim));
  p.total_q = int64_t(kBatch) * kSeqQ;
  p.total_k = int64_t(kBatch) * kSeqK;
  set_masks(p, masks, buf);
  p.mapping = Mapping::kSwizzledHeadFirst;
  p.num_xcds = 8;  // MI300X
  p.block_m = backward ? bwd_dq_block_m(KernelFamily::kCdna3, head_dim) : fwd_block_m(KernelFamily::kCdna3, head_dim);
  set_strides(p.q_batch_stride, p.q_row_stride, p.q_head_stride, kSeqQ, kHeadsQ, head_dim);
  set_strides(p.k_batch_stride, p.k_row_stride, p.k_head_stride, kSeqK, kHeadsKv, head_dim);
  set_strides(p.v_batch_stride, p.v_row_stride, p.v_head_stride, kSeqK, kHeadsKv, head_dim);
  set_strides(p.o_batch_stride, p.o_row_stride, p.o_head_stride, kSeqQ, kHeadsQ, head_dim);
  p.q = buf.get(q_bytes * elem);
  p.k = buf.get(k_bytes * elem);
  p.v = buf.get(k_bytes * elem);
  p.out = buf.get(q_bytes * elem);
  p.softmax_lse = static_cast<float*>(buf.get(size_t(kBatch) * kHeadsQ * kSeqQ * sizeof(float)));
  p.lse_head_stride = kSeqQ;
  p.lse_batch_stride = int64_t(kHeadsQ) * kSeqQ;
  if (!backward) return p;
  p.stats_pad = g.bwd_row_pad;
  p.stats_rows = (kSeqQ + g.bwd_row_pad - 1) / g.bwd_row_pad * g.bwd_row_pad;
  p.block_n = bwd_block_n(KernelFamily::kCdna3, head_dim);
  p.do_batch_stride = p.q_batch_stride, p.do_row_stride = p.q_row_stride, p.do_head_stride = p.q_head_stride;
  p.dk_batch_stride = p.k_batch_stride, p.dk_row_stride = p.k_row_stride, p.dk_head_stride = p.k_head_stride;
  p.dv_batch_stride = p.v_batch_stride, p.dv_row_stride = p.v_row_stride, p.dv_head_stride = p.v_head_stride;
  const size_t rows = size_t(kBatch) * kHeadsQ * p.stats_rows;
  p.dout = buf.get(q_bytes * elem);
  p.dk = buf.get(k_bytes * elem);
  p.dv = buf.get(k_bytes * elem);
  p.dq_accum = buf.get(q_bytes * sizeof(float));
  p.softmax_d = buf.get(rows * sizeof(float));
  p.lse_log2 = static_cast<float*>(buf.get(rows * sizeof(float)));
  return p;
}

struct Instantiation {
  std::string kind, dtype;
  int head_dim;
};

// CHIPLET_FA_INSTANTIATIONS: family/kind/dtype/hdim, ';'-separated.
std::vector<Instantiation> built_instantiations() {
  std::vector<Instantiation> out;
  std::stringstream list(CHIPLET_FA_INSTANTIATIONS);
  for (std::string entry; std::getline(list, entry, ';');) {
    std::stringstream fields(entry);
    std::string family, kind, dtype, hdim;
    std::getline(fields, family, '/'), std::getline(fields, kind, '/'), std::getline(fields, dtype, '/');
    std::getline(fields, hdim, '/');
    // The decoding units launch through launch_decode, with params of their own: not checked here.
    if (family == "cdna3" && (kind == "fwd" || kind == "bwd")) out.push_back({kind, dtype, std::stoi(hdim)});
  }
  return out;
}

}  // namespace

int main() {
  int devices = 0;
  const hipError_t count_err = hipGetDeviceCount(&devices);
  const bool device = count_err == hipSuccess && devices > 0;
  if (!device && count_err != hipErrorNoDevice) {
    std::printf("hip_launch_check: hipGetDeviceCount failed: %s\n", hipGetErrorString(count_err));
    return 1;
  }
  const hipError_t expected = device ? hipSuccess : hipErrorNoDevice;
  const std::vector<Instantiation> units = built_instantiations();
  std::printf("hip_launch_check: %zu cdna3 instantiations built for %s by %s; %d HIP device(s)\n", units.size(),
              CHIPLET_FA_GPU_ARCHS, CHIPLET_FA_GPU_COMPILER, devices);
  if (units.empty()) {
    std::printf("hip_launch_check: this build holds no cdna3 kernel\n");
    return 1;
  }
  int launches = 0, failures = 0;
  for (const Instantiation& u : units) {
    const DType dtype = u.dtype == "bf16" ? DType::kBFloat16 : DType::kFloat16;
    for (const Masks masks : kAllMasks) {
      for (const bool deterministic : {false, true}) {
        if (u.kind == "fwd" && deterministic) continue;
        Buffers buf{device};
        BwdParams p = make_params(u.head_dim, masks, u.kind == "bwd", buf);
        p.deterministic = deterministic;
        bool dispatched = false;
        hipError_t err = buf.error;
        if (err == hipSuccess) {
          dispatched = u.kind == "fwd"
                           ? launch_kernels(KernelFamily::kCdna3, dtype, static_cast<const FwdParams&>(p), nullptr)
                           : launch_kernels(KernelFamily::kCdna3, dtype, p, nullptr);
          err = hipGetLastError();
          if (device && err == hipSuccess) err = hipDeviceSynchronize();
        }
        ++launches;
        if (err != expected || !dispatched) {
          ++failures;
          std::printf("  %s %s D=%d masks=%s deterministic=%d: %s\n", u.kind.c_str(), u.dtype.c_str(), u.head_dim,
                      mask_name(masks), int(deterministic),
                      err != expected ? hipGetErrorName(err) : "launch_kernels has no case for it");
        }
      }
    }
  }
  if (failures) {
    std::printf("hip_launch_check: %d of %d launch calls did not end in %s\n", failures, launches, hipGetErrorName(expected));
    return 1;
  }
  if (device) {
    std::printf("hip_launch_check: %d launch calls completed on the device\n", launches);
  } else {
    std::printf("hip_launch_check: %d launch calls, each answered hipErrorNoDevice\n", launches);
    std::printf("no HIP device (hipErrorNoDevice): launch code linked and reached the runtime\n");
  }
  return 0;
}
