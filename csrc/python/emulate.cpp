// chiplet_fa._C.emulate, in a build with CHIPLET_FA_EMULATE=cdna3: the emulator's self-tests and
// the access trace of the emulated kernels (csrc/emulate/). Tensors in and out are contiguous CPU
// tensors (python/tensor.h).
#include <array>
#include <stdexcept>
#include <string>

#include "emulate/access_trace.h"
#include "emulate/selftest.h"
#include "emulate/workgroup.h"
#include "ops/emulated/emulated_kernels.h"
#include "python/bindings.h"
#include "python/function.h"
#include "python/tensor.h"

namespace chiplet_fa {
namespace {

using py::arg;
using py::Ref;

Ref mfma(const std::string& input, Ref a, Ref b, Ref c) {
  if (input != "f16" && input != "bf16")
    throw std::invalid_argument("emulate.mfma: input must be 'f16' or 'bf16', got " + input);
  const auto* a_data = static_cast<const uint16_t*>(py::cpu_tensor_data(a.get(), "emulate: a", "int16", 256));
  const auto* b_data = static_cast<const uint16_t*>(py::cpu_tensor_data(b.get(), "emulate: b", "int16", 256));
  const auto* c_data = static_cast<const float*>(py::cpu_tensor_data(c.get(), "emulate: c", "float32", 256));
  py::NewTensor d = py::empty_tensor({64, 4}, "float32");
  emu::selftest::mfma(input == "bf16", a_data, b_data, c_data, static_cast<float*>(d.data));
  return std::move(d.tensor);
}

Ref shfl_xor(Ref values, int lane_mask, int width) {
  const auto* in = static_cast<const float*>(py::cpu_tensor_data(values.get(), "emulate: values", "float32"));
  py::NewTensor out = py::empty_like(values.get());
  emu::selftest::shfl_xor(int(py::numel(values.get())), lane_mask, width, in, static_cast<float*>(out.data));
  return std::move(out.tensor);
}

Ref any(Ref predicates) {
  const auto* in = static_cast<const int*>(py::cpu_tensor_data(predicates.get(), "emulate: predicates", "int32"));
  py::NewTensor out = py::empty_like(predicates.get());
  emu::selftest::any(int(py::numel(predicates.get())), in, static_cast<int*>(out.data));
  return std::move(out.tensor);
}

Ref barrier_exchange(int threads, int shift, int rounds, bool barriers) {
  if (threads < 0 || rounds < 0)
    throw std::invalid_argument("emulate.barrier_exchange: threads and rounds must be >= 0");
  py::NewTensor out = py::empty_tensor({rounds, threads}, "int32");
  emu::selftest::barrier_exchange(threads, shift, rounds, barriers, static_cast<int*>(out.data));
  return std::move(out.tensor);
}

int64_t count_workgroups(std::array<unsigned, 3> grid, std::array<unsigned, 3> block, size_t lds_bytes) {
  const unsigned g[3] = {grid[0], grid[1], grid[2]}, b[3] = {block[0], block[1], block[2]};
  return emu::selftest::count_workgroups(g, b, lds_bytes);
}

void set_schedule(const std::string& order) {
  if (order != "ascending" && order != "descending" && order != "shuffled")
    throw std::invalid_argument("emulate.set_schedule: order must be ascending, descending or shuffled, got " + order);
  emu::set_schedule(order == "ascending"    ? emu::Schedule::kAscending
                    : order == "descending" ? emu::Schedule::kDescending
                                            : emu::Schedule::kShuffled);
}

std::pair<int, int> fwd_tile(Ref dtype, int head_dim) {
  const std::string name = py::dtype_name(dtype.get(), {"fwd_tile", "dtype"});
  const auto [block_m, block_n] = emulated_fwd_tile(py::dtype_named(name), head_dim);
  if (block_m <= 0)
    throw std::invalid_argument("emulate.fwd_tile: no cdna3 forward for " + name + " head_dim " +
                                std::to_string(head_dim) + " in this build");
  return {block_m, block_n};
}

// Per launch since begin_trace(): where, kernel, regions and its reads as an (N, 6) int64 tensor.
std::vector<Ref> end_trace(int num_xcds) {
  if (num_xcds < 1) throw std::invalid_argument("emulate.end_trace: num_xcds must be >= 1");
  std::vector<Ref> launches;
  for (const emu::TracedLaunch& l : emu::end_trace()) {
    py::NewTensor reads = py::empty_tensor({int64_t(l.reads.size()), 6}, "int64");
    int64_t* r = static_cast<int64_t*>(reads.data);
    for (const emu::TraceRead& x : l.reads) {
      *r++ = x.wid;
      *r++ = x.wid % num_xcds;  // the emulated dispatcher's round-robin XCD
      *r++ = x.region;
      *r++ = x.batch;
      *r++ = x.head;
      *r++ = x.row;
    }
    launches.push_back(py::dict({{"where", py::to_py(l.where)},
                                 {"kernel", py::to_py(l.what)},
                                 {"regions", py::to_py(l.regions)},
                                 {"reads", reads.tensor}}));
  }
  return launches;
}

void begin_trace() { emu::begin_trace(); }
float unwritten_lds() { return emu::selftest::unwritten_lds(); }
void broken(const std::string& which) { emu::selftest::broken(which); }

}  // namespace

void add_emulate(PyObject* root) {
  PyObject* m = py::add_submodule(root, "emulate", "The emulated CDNA3 backend (csrc/emulate/)");
  py::def(m, "begin_trace", begin_trace, {}, "Record the copy-path reads of every emulated launch until end_trace()");
  py::def(m, "end_trace", end_trace, {arg("num_xcds")},
          "Stop recording; per launch: where, kernel, regions and reads (N, 6) int64: wid, xcd = wid % num_xcds, "
          "region, batch, head, row, each row a workgroup read first, by workgroup, in its order");
  py::def(m, "fwd_tile", fwd_tile, {arg("dtype"), arg("head_dim")},
          "(block_m, block_n) of the cdna3 forward a call runs");
  py::def(m, "set_schedule", set_schedule, {arg("order")},
          "The order the emulator runs a workgroup's threads in between barriers (default ascending): results "
          "that change with it expose a missing barrier");
  py::def(m, "mfma", mfma, {arg("input"), arg("a"), arg("b"), arg("c")},
          "One wave's __builtin_amdgcn_mfma_f32_16x16x16{f16,bf16_1k}: lane l passes a[l], b[l] (raw 16-bit, int16 "
          "(64, 4)) and c[l] (float32 (64, 4)); returns d (64, 4)");
  py::def(m, "shfl_xor", shfl_xor, {arg("values"), arg("lane_mask"), arg("width", 64)},
          "__shfl_xor over a workgroup of values.numel() work-items");
  py::def(m, "any", any, {arg("predicates")}, "__any over a workgroup of predicates.numel() work-items");
  py::def(m, "barrier_exchange", barrier_exchange, {arg("threads"), arg("shift"), arg("rounds"), arg("barriers", true)},
          "Per round, what work-item t read from LDS word (t + shift) % threads after a barrier (none: a race)");
  py::def(m, "count_workgroups", count_workgroups, {arg("grid"), arg("block"), arg("lds_bytes", size_t(0))},
          "Launch a kernel counting its workgroups (or the launch's refusal, past the hardware's limits)");
  py::def(m, "unwritten_lds", unwritten_lds, {}, "What a work-item reads from LDS no one wrote");
  py::def(m, "broken", broken, {arg("which")},
          "Runs a kernel that breaks a rule the emulator enforces (it raises RuntimeError)");
}

}  // namespace chiplet_fa
