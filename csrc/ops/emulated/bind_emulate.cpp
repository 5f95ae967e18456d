#include "ops/emulated/bind_emulate.h"

#include <array>
#include <cstring>
#include <string>

#include <torch/extension.h>

#include "emulate/access_trace.h"
#include "emulate/selftest.h"
#include "emulate/workgroup.h"
#include "ops/emulated/emulated_kernels.h"
#include "ops/fwd_api.h"

namespace py = pybind11;

namespace chiplet_fa {
namespace {

// A contiguous CPU tensor of `n` elements of `dtype`, or a ValueError naming it.
void expect(const at::Tensor& t, const char* name, at::ScalarType dtype, int64_t n) {
  TORCH_CHECK_VALUE(t.device().is_cpu() && t.scalar_type() == dtype && t.is_contiguous() && t.numel() == n,
                    "emulate: ", name, " must be a contiguous CPU ", dtype, " tensor of ", n, " elements, got ",
                    t.scalar_type(), " ", t.sizes(), " on ", t.device());
}

at::Tensor mfma(const std::string& input, const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) {
  TORCH_CHECK_VALUE(input == "f16" || input == "bf16", "emulate.mfma: input must be 'f16' or 'bf16', got ", input);
  expect(a, "a", at::kShort, 256);
  expect(b, "b", at::kShort, 256);
  expect(c, "c", at::kFloat, 256);
  at::Tensor d = at::empty({64, 4}, at::kFloat);
  emu::selftest::mfma(input == "bf16", reinterpret_cast<const uint16_t*>(a.data_ptr<int16_t>()),
                      reinterpret_cast<const uint16_t*>(b.data_ptr<int16_t>()), c.data_ptr<float>(),
                      d.data_ptr<float>());
  return d;
}

py::list end_trace(int num_xcds) {
  py::list launches;
  for (const emu::TracedLaunch& l : emu::end_trace()) {
    at::Tensor reads = at::empty({int64_t(l.reads.size()), 6}, at::kLong);
    int64_t* r = reads.data_ptr<int64_t>();
    for (const emu::TraceRead& x : l.reads) {
      *r++ = x.wid;
      *r++ = x.wid % num_xcds;  // the emulated dispatcher's round-robin XCD
      *r++ = x.region;
      *r++ = x.batch;
      *r++ = x.head;
      *r++ = x.row;
    }
    py::dict d;
    d["where"] = l.where;
    d["kernel"] = l.what;
    d["regions"] = l.regions;
    d["reads"] = reads;
    launches.append(d);
  }
  return launches;
}

}  // namespace

void bind_emulate(py::module_& root) {
  py::module_ m = root.def_submodule("emulate", "The emulated CDNA3 backend (csrc/emulate/)");
  m.def("begin_trace", &emu::begin_trace, "Record the copy-path reads of every emulated launch until end_trace()");
  m.def("end_trace", &end_trace, py::arg("num_xcds"),
        "Stop recording; per launch: where, kernel, regions and reads (N, 6) int64: wid, xcd = wid % num_xcds, "
        "region, batch, head, row, each row a workgroup read first, by workgroup, in its order");
  m.def("fwd_tile", [](const at::ScalarType dtype, int head_dim) {
          const auto [block_m, block_n] = emulated_fwd_tile(dtype_of(dtype), head_dim);
          TORCH_CHECK_VALUE(block_m > 0, "emulate.fwd_tile: no cdna3 forward for ", dtype, " head_dim ", head_dim,
                            " in this build");
          return py::make_tuple(block_m, block_n);
        }, py::arg("dtype"), py::arg("head_dim"), "(block_m, block_n) of the cdna3 forward a call runs");

  m.def("set_schedule", [](const std::string& order) {
          TORCH_CHECK_VALUE(order == "ascending" || order == "descending" || order == "shuffled",
                            "emulate.set_schedule: order must be ascending, descending or shuffled, got ", order);
          emu::set_schedule(order == "ascending"    ? emu::Schedule::kAscending
                            : order == "descending" ? emu::Schedule::kDescending
                                                    : emu::Schedule::kShuffled);
        }, py::arg("order"),
        "The order the emulator runs a workgroup's threads in between barriers (default ascending): results "
        "that change with it expose a missing barrier");

  m.def("mfma", &mfma, py::arg("input"), py::arg("a"), py::arg("b"), py::arg("c"),
        "One wave's __builtin_amdgcn_mfma_f32_16x16x16{f16,bf16_1k}: lane l passes a[l], b[l] (raw 16-bit, int16 "
        "(64, 4)) and c[l] (float32 (64, 4)); returns d (64, 4)");
  m.def("shfl_xor", [](const at::Tensor& in, int lane_mask, int width) {
          expect(in, "in", at::kFloat, in.numel());
          at::Tensor out = at::empty_like(in);
          emu::selftest::shfl_xor(int(in.numel()), lane_mask, width, in.data_ptr<float>(), out.data_ptr<float>());
          return out;
        }, py::arg("values"), py::arg("lane_mask"), py::arg("width") = 64,
        "__shfl_xor over a workgroup of values.numel() work-items");
  m.def("any", [](const at::Tensor& in) {
          expect(in, "in", at::kInt, in.numel());
          at::Tensor out = at::empty_like(in);
          emu::selftest::any(int(in.numel()), in.data_ptr<int>(), out.data_ptr<int>());
          return out;
        }, py::arg("predicates"), "__any over a workgroup of predicates.numel() work-items");
  m.def("barrier_exchange", [](int threads, int shift, int rounds, bool barriers) {
          at::Tensor out = at::empty({rounds, threads}, at::kInt);
          emu::selftest::barrier_exchange(threads, shift, rounds, barriers, out.data_ptr<int>());
          return out;
        }, py::arg("threads"), py::arg("shift"), py::arg("rounds"), py::arg("barriers") = true,
        "Per round, what work-item t read from LDS word (t + shift) % threads after a barrier (none: a race)");
  m.def("count_workgroups",
        [](std::array<unsigned, 3> grid, std::array<unsigned, 3> block, size_t lds_bytes) {
          const unsigned g[3] = {grid[0], grid[1], grid[2]}, b[3] = {block[0], block[1], block[2]};
          return emu::selftest::count_workgroups(g, b, lds_bytes);
        },
        py::arg("grid"), py::arg("block"), py::arg("lds_bytes") = 0,
        "Launch a kernel counting its workgroups (or the launch's refusal, past the hardware's limits)");
  m.def("unwritten_lds", &emu::selftest::unwritten_lds, "What a work-item reads from LDS no one wrote");
  m.def("broken", &emu::selftest::broken, py::arg("which"),
        "Runs a kernel that breaks a rule the emulator enforces (it raises RuntimeError)");
}

}  // namespace chiplet_fa
