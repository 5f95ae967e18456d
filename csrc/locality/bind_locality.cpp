#include "bind_locality.h"

#include <pybind11/functional.h>
#include <pybind11/stl.h>
#include <c10/core/Device.h>

#include "mapping/mapping_names.h"
#include "mapping/topology.h"
#include "auto_policy.h"
#include "model.h"

namespace py = pybind11;

namespace chiplet_fa::locality {
namespace {

Mapping policy_by_name(const std::string& name) {
  if (const std::optional<Mapping> m = mapping_by_name(name)) return *m;
  throw py::value_error("mapping must be one of 'block_first', 'head_first', 'swizzled_block_first', "
                        "'swizzled_head_first'; got '" + name + "'");
}

py::dict to_dict(const Traffic& t) {
  py::dict d;
  d["kv_read_bytes"] = t.kv_read_bytes;
  d["kv_hit_bytes"] = t.kv_hit_bytes;
  d["q_read_bytes"] = t.q_read_bytes;
  d["o_write_bytes"] = t.o_write_bytes;
  d["dram_read_bytes"] = t.dram_read_bytes();
  d["hit_rate"] = t.hit_rate();
  d["kv_hit_rate"] = t.kv_hit_rate();
  return d;
}

// The shape the Python keyword arguments describe, validated (ValueError naming the field).
AttnShape shape_of(int64_t batch, int64_t num_q_heads, int64_t num_kv_heads, int64_t seqlen_q, int64_t seqlen_k,
                   int64_t head_dim, int elem_bytes, bool causal, int block_m, int block_n,
                   std::vector<int64_t> seqlens_q, std::vector<int64_t> seqlens_k) {
  AttnShape s{batch, num_q_heads, num_kv_heads, seqlen_q, seqlen_k, head_dim, elem_bytes, causal, block_m, block_n,
              std::move(seqlens_q), std::move(seqlens_k)};
  try {
    validate(s);
  } catch (const std::invalid_argument& e) {
    throw py::value_error(e.what());
  }
  return s;
}

int xcds_or_domains(int mapping_xcds, const Topology& topo) {
  if (mapping_xcds == -1) return topo.num_domains;
  if (mapping_xcds < 1) throw py::value_error("mapping_xcds must be -1 (the topology's domains) or >= 1");
  return mapping_xcds;
}

// The L2 domains a model runs on: Topology, its presets and the dispatch kinds.
void bind_topology(py::module_& m) {
  py::enum_<Dispatch>(m, "Dispatch")
      .value("round_robin", Dispatch::kRoundRobin)
      .value("single", Dispatch::kSingle);

  py::class_<Topology>(m, "Topology")
      .def(py::init([](std::string name, int num_domains, int64_t l2_bytes, int line_bytes, int ways,
                       int cus_per_domain, int wgs_per_cu, Dispatch dispatch, double stagger_steps,
                       std::string note) {
             Topology t{name, num_domains, l2_bytes, line_bytes, ways, cus_per_domain, wgs_per_cu,
                        dispatch, stagger_steps, note};
             validate(t);
             return t;
           }),
           py::arg("name"), py::arg("num_domains"), py::arg("l2_bytes"), py::arg("line_bytes") = 128,
           py::arg("ways") = 16, py::arg("cus_per_domain"), py::arg("wgs_per_cu") = 1,
           py::arg("dispatch") = Dispatch::kRoundRobin, py::arg("stagger_steps") = kDefaultStaggerSteps,
           py::arg("note") = "")
      .def_readwrite("name", &Topology::name)
      .def_readwrite("num_domains", &Topology::num_domains)
      .def_readwrite("l2_bytes", &Topology::l2_bytes)
      .def_readwrite("line_bytes", &Topology::line_bytes)
      .def_readwrite("ways", &Topology::ways)
      .def_readwrite("cus_per_domain", &Topology::cus_per_domain)
      .def_readwrite("wgs_per_cu", &Topology::wgs_per_cu)
      .def_readwrite("dispatch", &Topology::dispatch)
      .def_readwrite("stagger_steps", &Topology::stagger_steps)
      .def_readwrite("note", &Topology::note)
      .def("__copy__", [](const Topology& t) { return t; })
      .def("__repr__", [](const Topology& t) {
        return "Topology(" + t.name + ": " + std::to_string(t.num_domains) + " x " +
               std::to_string(t.l2_bytes >> 20) + " MiB L2, " + std::to_string(t.cus_per_domain) +
               " CUs x " + std::to_string(t.wgs_per_cu) + " WGs per domain, stagger " +
               std::to_string(t.stagger_steps) + ")";
      });

  m.def("presets", &topology_presets, "Topology presets (MI300X, MI300A, MI308X, MI355X, H100, H200)");
  m.def("preset", [](const std::string& name) {
    try {
      return topology_preset(name);
    } catch (const std::invalid_argument& e) {
      throw py::value_error(e.what());
    }
  }, py::arg("name"));
  m.def("topology_for_domains", &topology_for_domains, py::arg("num_domains"),
        "Topology the auto policy assumes for a device with this many L2 domains");
}

// The model's two answers for one shape and mapping: estimate() closed-form, simulate() by trace.
void bind_model(py::module_& m) {
  auto run = [](bool sim) {
    return [sim](const Topology& topo, int64_t batch, int64_t num_q_heads, int64_t num_kv_heads,
                 int64_t seqlen_q, int64_t seqlen_k, int64_t head_dim, int elem_bytes, bool causal,
                 int block_m, int block_n, std::vector<int64_t> seqlens_q, std::vector<int64_t> seqlens_k,
                 const std::string& mapping, int mapping_xcds, std::optional<py::function> progress) {
      const AttnShape s = shape_of(batch, num_q_heads, num_kv_heads, seqlen_q, seqlen_k, head_dim, elem_bytes,
                                   causal, block_m, block_n, std::move(seqlens_q), std::move(seqlens_k));
      const Mapping policy = policy_by_name(mapping);
      const int xcds = xcds_or_domains(mapping_xcds, topo);
      Traffic t;
      try {
        validate(topo);
      } catch (const std::invalid_argument& e) {
        throw py::value_error(e.what());
      }
      if (!sim) {
        py::gil_scoped_release release;
        t = estimate(topo, s, policy, xcds);
      } else {
        std::function<void(int64_t, int64_t)> cb;
        if (progress) cb = [&](int64_t done, int64_t total) {
          py::gil_scoped_acquire acquire;
          (*progress)(done, total);
        };
        py::gil_scoped_release release;
        t = simulate(topo, s, policy, xcds, cb);
      }
      return to_dict(t);
    };
  };
  const char* sim_doc =
      "Trace-driven simulation: every K/V tile read of the FA2 forward through per-domain "
      "set-associative LRU caches. Returns byte counts, hit_rate (all L2 traffic, as Nsight) and "
      "kv_hit_rate. seqlens_q/seqlens_k: per-sequence lengths of a packed batch (batch entries "
      "each; empty: every sequence has seqlen_q/seqlen_k, which are otherwise bounds). "
      "progress(done, total) is called about every 0.1 s.";
  const char* est_doc = "Closed-form estimate of the same quantities (see docs/l2_model.md).";
  for (int i = 0; i < 2; ++i) {
    m.def(i ? "simulate" : "estimate", run(i == 1), py::arg("topology"), py::arg("batch"),
          py::arg("num_q_heads"), py::arg("num_kv_heads"), py::arg("seqlen_q"), py::arg("seqlen_k"),
          py::arg("head_dim"), py::arg("elem_bytes") = 2, py::arg("causal") = false,
          py::arg("block_m") = 128, py::arg("block_n") = 64, py::arg("seqlens_q") = std::vector<int64_t>{},
          py::arg("seqlens_k") = std::vector<int64_t>{}, py::arg("mapping") = "swizzled_head_first",
          py::arg("mapping_xcds") = -1, py::arg("progress") = py::none(), i ? sim_doc : est_doc);
  }
}

// What mapping='auto' decides: the mapping for a shape, and the lengths it decides a packed batch with.
void bind_auto(py::module_& m) {
  m.def("choose_mapping",
        [](const Topology& topo, int64_t batch, int64_t num_q_heads, int64_t num_kv_heads,
           int64_t seqlen_q, int64_t seqlen_k, int64_t head_dim, int elem_bytes, bool causal,
           int block_m, int block_n, std::vector<int64_t> seqlens_q, std::vector<int64_t> seqlens_k) {
          const AttnShape s = shape_of(batch, num_q_heads, num_kv_heads, seqlen_q, seqlen_k, head_dim, elem_bytes,
                                       causal, block_m, block_n, std::move(seqlens_q), std::move(seqlens_k));
          const AutoChoice c = choose_mapping(s, topo);
          py::dict predicted;
          for (int i = 0; i < kNumMappings; ++i)
            if (c.candidate[size_t(i)]) predicted[kMappingNames[i]] = to_dict(c.predicted[size_t(i)]);
          return py::make_tuple(kMappingNames[int(c.mapping)], predicted);
        },
        py::arg("topology"), py::arg("batch"), py::arg("num_q_heads"), py::arg("num_kv_heads"),
        py::arg("seqlen_q"), py::arg("seqlen_k"), py::arg("head_dim"), py::arg("elem_bytes") = 2,
        py::arg("causal") = false, py::arg("block_m") = 128, py::arg("block_n") = 64,
        py::arg("seqlens_q") = std::vector<int64_t>{}, py::arg("seqlens_k") = std::vector<int64_t>{},
        "The auto policy's choice (the op's, cached per shape) and its prediction per candidate");

  m.def("auto_lengths",
        [](int64_t batch, int64_t max_seqlen_q, int64_t max_seqlen_k, int64_t total_q, int64_t total_k,
           std::optional<std::vector<int32_t>> cu_seqlens_q, std::optional<std::vector<int32_t>> cu_seqlens_k) {
          AttnShape s{batch, 1, 1, max_seqlen_q, max_seqlen_k, 1};
          const bool host = cu_seqlens_q && cu_seqlens_k && int64_t(cu_seqlens_q->size()) == batch + 1 &&
                            int64_t(cu_seqlens_k->size()) == batch + 1;
          describe_packed(s, host ? cu_seqlens_q->data() : nullptr, host ? cu_seqlens_k->data() : nullptr, total_q,
                          total_k);
          return py::make_tuple(s.seqlen_q, s.seqlen_k, s.seqlens_q, s.seqlens_k);
        },
        py::arg("batch"), py::arg("max_seqlen_q"), py::arg("max_seqlen_k"), py::arg("total_q"), py::arg("total_k"),
        py::arg("cu_seqlens_q") = py::none(), py::arg("cu_seqlens_k") = py::none(),
        "The lengths the op's mapping='auto' decides a packed batch with: (seqlen_q, seqlen_k, seqlens_q, "
        "seqlens_k); exact from cu_seqlens read on the host, the mean length without them (a GPU's)");
}

// The trace the simulator replays, and the simulator on a given trace (an emulated kernel's,
// chiplet_fa.emulate): per dispatch domain, (q_bytes, [K/V pair keys]) per workgroup.
void bind_streams(py::module_& m) {
  using Streams = std::vector<std::vector<std::pair<int64_t, std::vector<int64_t>>>>;
  m.def("model_streams",
        [](const Topology& topo, int64_t batch, int64_t num_q_heads, int64_t num_kv_heads, int64_t seqlen_q,
           int64_t seqlen_k, int64_t head_dim, int elem_bytes, bool causal, int block_m, int block_n,
           std::vector<int64_t> seqlens_q, std::vector<int64_t> seqlens_k, const std::string& mapping,
           int mapping_xcds) {
          const AttnShape s = shape_of(batch, num_q_heads, num_kv_heads, seqlen_q, seqlen_k, head_dim, elem_bytes,
                                       causal, block_m, block_n, std::move(seqlens_q), std::move(seqlens_k));
          Streams out;
          for (const auto& domain : model_streams(topo, s, policy_by_name(mapping), xcds_or_domains(mapping_xcds, topo))) {
            auto& o = out.emplace_back();
            for (const WorkgroupStream& w : domain) o.emplace_back(w.q_bytes, w.pairs);
          }
          return out;
        },
        py::arg("topology"), py::arg("batch"), py::arg("num_q_heads"), py::arg("num_kv_heads"), py::arg("seqlen_q"),
        py::arg("seqlen_k"), py::arg("head_dim"), py::arg("elem_bytes") = 2, py::arg("causal") = false,
        py::arg("block_m") = 128, py::arg("block_n") = 64, py::arg("seqlens_q") = std::vector<int64_t>{},
        py::arg("seqlens_k") = std::vector<int64_t>{}, py::arg("mapping") = "swizzled_head_first",
        py::arg("mapping_xcds") = -1,
        "The per-domain streams simulate() replays: [(q_bytes, [pair keys: acc * num_n_blocks + n_block])] per domain");
  m.def("simulate_streams",
        [](const Topology& topo, int64_t batch, int64_t num_q_heads, int64_t num_kv_heads, int64_t seqlen_q,
           int64_t seqlen_k, int64_t head_dim, int elem_bytes, bool causal, int block_m, int block_n,
           std::vector<int64_t> seqlens_q, std::vector<int64_t> seqlens_k, const Streams& streams) {
          const AttnShape s = shape_of(batch, num_q_heads, num_kv_heads, seqlen_q, seqlen_k, head_dim, elem_bytes,
                                       causal, block_m, block_n, std::move(seqlens_q), std::move(seqlens_k));
          DomainStreams in;
          for (const auto& domain : streams) {
            auto& d = in.emplace_back();
            for (const auto& [q_bytes, pairs] : domain) d.push_back(WorkgroupStream{q_bytes, pairs});
          }
          Traffic t;
          try {
            validate(topo);
            py::gil_scoped_release release;
            t = simulate_streams(topo, s, in);
          } catch (const std::invalid_argument& e) {
            throw py::value_error(e.what());
          }
          return to_dict(t);
        },
        py::arg("topology"), py::arg("batch"), py::arg("num_q_heads"), py::arg("num_kv_heads"), py::arg("seqlen_q"),
        py::arg("seqlen_k"), py::arg("head_dim"), py::arg("elem_bytes") = 2, py::arg("causal") = false,
        py::arg("block_m") = 128, py::arg("block_n") = 64, py::arg("seqlens_q") = std::vector<int64_t>{},
        py::arg("seqlens_k") = std::vector<int64_t>{}, py::arg("streams"),
        "simulate() on given per-domain streams (as model_streams returns them) instead of the model's own");
}

// How many L2 domains (XCDs) the op assumes for a device, and why.
void bind_detection(py::module_& m) {
  m.def("detect_xcds_rocm",
        [](const std::string& kfd_root, int64_t device_index, std::optional<std::string> env_override,
           std::optional<std::string> visible_devices, int64_t cu_count, const std::string& arch) {
          try {
            const XcdDetection d =
                detect_xcds_rocm(kfd_root, device_index, env_override, visible_devices, cu_count, arch);
            return py::make_tuple(d.num_xcds, d.source, d.assumed);
          } catch (const std::invalid_argument& e) {
            throw py::value_error(e.what());
          }
        },
        py::arg("kfd_root"), py::arg("device_index") = 0, py::arg("env_override") = py::none(),
        py::arg("visible_devices") = py::none(), py::arg("cu_count") = 0, py::arg("arch") = "",
        "The ROCm XCD-count rule with explicit inputs: (num_xcds, source, assumed)");
  m.def("detect_xcds",
        [](const std::string& device) {
          const c10::Device dev(device);
          const XcdDetection d = dev.is_cuda() ? detect_xcds(dev.index() < 0 ? 0 : dev.index()) : cpu_xcds();
          return py::make_tuple(d.num_xcds, d.source, d.assumed);
        },
        py::arg("device"), "XCD count the op uses for a device: (num_xcds, source, assumed)");
}

}  // namespace

void bind_locality(py::module_& root) {
  py::module_ m = root.def_submodule("locality", "L2 locality model (csrc/locality)");
  bind_topology(m);
  bind_model(m);
  bind_auto(m);
  bind_streams(m);
  bind_detection(m);
}

}  // namespace chiplet_fa::locality
