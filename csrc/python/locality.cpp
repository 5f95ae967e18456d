// chiplet_fa._C.locality: the L2 locality model (csrc/locality) and the XCD detection the op uses.
// Topology is a Python type holding the C++ struct; Dispatch an enum.Enum.
#include <new>

#include "locality/auto_policy.h"
#include "locality/model.h"
#include "mapping/mapping_names.h"
#include "mapping/topology.h"
#include "python/bindings.h"
#include "python/device.h"
#include "python/function.h"

namespace chiplet_fa::locality {
namespace {

// Made at import and held for the process.
PyObject* topology_type = nullptr;
PyObject* dispatch_enum = nullptr;

struct TopologyObject {
  PyObject_HEAD
  Topology value;
};

Topology& topology_of(PyObject* o) { return reinterpret_cast<TopologyObject*>(o)->value; }

PyObject* new_topology(PyTypeObject* type, const Topology& value) {
  auto alloc = reinterpret_cast<allocfunc>(PyType_GetSlot(type, Py_tp_alloc));
  PyObject* self = alloc(type, 0);
  if (self) new (&topology_of(self)) Topology(value);
  return self;
}

}  // namespace
}  // namespace chiplet_fa::locality

namespace chiplet_fa::py {

template <>
struct Convert<locality::Dispatch> {
  static locality::Dispatch from(PyObject* o, const Where& w) {
    const int is_dispatch = PyObject_IsInstance(o, locality::dispatch_enum);
    if (is_dispatch < 0) throw PythonError{};
    if (!is_dispatch) type_error(w, "a Dispatch", o);
    return locality::Dispatch(from_py<int>(check(PyObject_GetAttrString(o, "value")).get(), w));
  }
  static Ref to(locality::Dispatch d) { return check(PyObject_CallFunction(locality::dispatch_enum, "i", int(d))); }
};

template <>
struct Convert<locality::Topology> {
  static locality::Topology from(PyObject* o, const Where& w) {
    const int is_topology = PyObject_IsInstance(o, locality::topology_type);
    if (is_topology < 0) throw PythonError{};
    if (!is_topology) type_error(w, "a Topology", o);
    return locality::topology_of(o);
  }
  static Ref to(const locality::Topology& t) {
    return check(locality::new_topology(reinterpret_cast<PyTypeObject*>(locality::topology_type), t));
  }
};

template <>
struct Convert<locality::Traffic> {
  static Ref to(const locality::Traffic& t) {
    return dict({{"kv_read_bytes", to_py(t.kv_read_bytes)},
                 {"kv_hit_bytes", to_py(t.kv_hit_bytes)},
                 {"q_read_bytes", to_py(t.q_read_bytes)},
                 {"o_write_bytes", to_py(t.o_write_bytes)},
                 {"dram_read_bytes", to_py(t.dram_read_bytes())},
                 {"hit_rate", to_py(t.hit_rate())},
                 {"kv_hit_rate", to_py(t.kv_hit_rate())}});
  }
};

}  // namespace chiplet_fa::py

namespace chiplet_fa::locality {
namespace {

using py::arg;
using py::Ref;

// ---- Topology: the struct's fields as attributes, a keyword constructor that validates, copy, repr.

template <auto Field>
PyObject* get_field(PyObject* self, void*) {
  try {
    return py::to_py(topology_of(self).*Field).release();
  } catch (...) {
    return py::raise_current_exception();
  }
}

template <auto Field>
int set_field(PyObject* self, PyObject* value, void* name) {
  try {
    if (!value) throw std::invalid_argument("Topology fields cannot be deleted");
    using T = std::remove_reference_t<decltype(topology_of(self).*Field)>;
    topology_of(self).*Field = py::from_py<T>(value, {"Topology", static_cast<const char*>(name)});
    return 0;
  } catch (...) {
    py::raise_current_exception();
    return -1;
  }
}

template <auto Field>
PyGetSetDef field(const char* name) {
  return {name, get_field<Field>, set_field<Field>, nullptr, const_cast<char*>(name)};
}

PyGetSetDef topology_fields[] = {
    field<&Topology::name>("name"),
    field<&Topology::num_domains>("num_domains"),
    field<&Topology::l2_bytes>("l2_bytes"),
    field<&Topology::line_bytes>("line_bytes"),
    field<&Topology::ways>("ways"),
    field<&Topology::cus_per_domain>("cus_per_domain"),
    field<&Topology::wgs_per_cu>("wgs_per_cu"),
    field<&Topology::dispatch>("dispatch"),
    field<&Topology::stagger_steps>("stagger_steps"),
    field<&Topology::note>("note"),
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

// The constructor's signature; made at import (its defaults are Python objects), never freed.
const py::Signature* topology_signature = nullptr;

PyObject* topology_new(PyTypeObject* type, PyObject*, PyObject*) { return new_topology(type, Topology{}); }

int topology_init(PyObject* self, PyObject* args, PyObject* kwargs) {
  try {
    const py::Signature& sig = *topology_signature;
    const std::vector<PyObject*> a = sig.bind(args, kwargs);
    Topology t{py::from_py<std::string>(a[0], sig.where(0)),  py::from_py<int32_t>(a[1], sig.where(1)),
               py::from_py<int64_t>(a[2], sig.where(2)),      py::from_py<int32_t>(a[3], sig.where(3)),
               py::from_py<int32_t>(a[4], sig.where(4)),      py::from_py<int32_t>(a[5], sig.where(5)),
               py::from_py<int32_t>(a[6], sig.where(6)),      py::from_py<Dispatch>(a[7], sig.where(7)),
               py::from_py<double>(a[8], sig.where(8)),       py::from_py<std::string>(a[9], sig.where(9))};
    validate(t);
    topology_of(self) = std::move(t);
    return 0;
  } catch (...) {
    py::raise_current_exception();
    return -1;
  }
}

void topology_dealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  topology_of(self).~Topology();
  reinterpret_cast<freefunc>(PyType_GetSlot(type, Py_tp_free))(self);
  Py_DECREF(type);
}

PyObject* topology_repr(PyObject* self) {
  const Topology& t = topology_of(self);
  const std::string s = "Topology(" + t.name + ": " + std::to_string(t.num_domains) + " x " +
                        std::to_string(t.l2_bytes >> 20) + " MiB L2, " + std::to_string(t.cus_per_domain) +
                        " CUs x " + std::to_string(t.wgs_per_cu) + " WGs per domain, stagger " +
                        std::to_string(t.stagger_steps) + ")";
  return PyUnicode_FromStringAndSize(s.data(), Py_ssize_t(s.size()));
}

PyObject* topology_copy(PyObject* self, PyObject*) { return new_topology(Py_TYPE(self), topology_of(self)); }

PyMethodDef topology_methods[] = {
    {"__copy__", topology_copy, METH_NOARGS, nullptr},
    {nullptr, nullptr, 0, nullptr},
};

PyType_Slot topology_slots[] = {
    {Py_tp_new, reinterpret_cast<void*>(topology_new)},
    {Py_tp_init, reinterpret_cast<void*>(topology_init)},
    {Py_tp_dealloc, reinterpret_cast<void*>(topology_dealloc)},
    {Py_tp_repr, reinterpret_cast<void*>(topology_repr)},
    {Py_tp_getset, topology_fields},
    {Py_tp_methods, topology_methods},
    {Py_tp_doc, const_cast<char*>("The L2 domains a model runs on (csrc/locality/topology_presets.h)")},
    {0, nullptr},
};

PyType_Spec topology_spec = {"chiplet_fa._C.locality.Topology", int(sizeof(TopologyObject)), 0,
                             Py_TPFLAGS_DEFAULT, topology_slots};

void add_topology(PyObject* m) {
  Ref enum_module = py::check(PyImport_ImportModule("enum"));
  Ref enum_class = py::check(PyObject_GetAttrString(enum_module.get(), "Enum"));
  Ref members = py::to_py(std::vector<std::pair<std::string, int>>{{"round_robin", int(Dispatch::kRoundRobin)},
                                                                    {"single", int(Dispatch::kSingle)}});
  Ref kwargs = py::dict({{"module", py::to_py("chiplet_fa._C.locality")}});
  Ref args = py::tuple(std::string("Dispatch"), members);
  Ref dispatch = py::check(PyObject_Call(enum_class.get(), args.get(), kwargs.get()));
  Ref topology = py::check(PyType_FromSpec(&topology_spec));
  if (PyModule_AddObjectRef(m, "Dispatch", dispatch.get()) < 0 ||
      PyModule_AddObjectRef(m, "Topology", topology.get()) < 0)
    throw py::PythonError{};
  dispatch_enum = dispatch.release();
  topology_type = topology.release();
  topology_signature = new py::Signature{
      "Topology",
      {arg("name"), arg("num_domains"), arg("l2_bytes"), arg("line_bytes", 128), arg("ways", 16), arg("cus_per_domain"),
       arg("wgs_per_cu", 1), arg("dispatch", Dispatch::kRoundRobin), arg("stagger_steps", kDefaultStaggerSteps),
       arg("note", "")}};
}

std::vector<Topology> presets() { return topology_presets(); }
Topology preset(const std::string& name) { return topology_preset(name); }
Topology for_domains(int num_domains) { return topology_for_domains(num_domains); }

// ---- The model: the shape arguments every function takes, validated (ValueError naming the field).

std::vector<py::Arg> with_shape_args(std::vector<py::Arg> before) {
  for (py::Arg& a : std::vector<py::Arg>{
           arg("batch"), arg("num_q_heads"), arg("num_kv_heads"), arg("seqlen_q"), arg("seqlen_k"), arg("head_dim"),
           arg("elem_bytes", 2), arg("causal", false), arg("block_m", 128), arg("block_n", 64),
           arg("seqlens_q", std::vector<int64_t>{}), arg("seqlens_k", std::vector<int64_t>{})})
    before.push_back(std::move(a));
  return before;
}

AttnShape shape_of(int64_t batch, int64_t num_q_heads, int64_t num_kv_heads, int64_t seqlen_q, int64_t seqlen_k,
                   int64_t head_dim, int elem_bytes, bool causal, int block_m, int block_n,
                   std::vector<int64_t> seqlens_q, std::vector<int64_t> seqlens_k) {
  AttnShape s{batch, num_q_heads, num_kv_heads, seqlen_q, seqlen_k, head_dim, elem_bytes, causal, block_m, block_n,
              std::move(seqlens_q), std::move(seqlens_k)};
  validate(s);
  return s;
}

Mapping policy_by_name(const std::string& name) {
  if (const std::optional<Mapping> m = mapping_by_name(name)) return *m;
  throw std::invalid_argument("mapping must be one of 'block_first', 'head_first', 'swizzled_block_first', "
                              "'swizzled_head_first'; got '" + name + "'");
}

int xcds_or_domains(int mapping_xcds, const Topology& topo) {
  if (mapping_xcds == -1) return topo.num_domains;
  if (mapping_xcds < 1) throw std::invalid_argument("mapping_xcds must be -1 (the topology's domains) or >= 1");
  return mapping_xcds;
}

// progress(done, total), called with the GIL taken back; a Python exception it raises ends the run.
std::function<void(int64_t, int64_t)> progress_callback(const std::optional<Ref>& progress) {
  if (!progress) return {};
  PyObject* fn = progress->get();
  return [fn](int64_t done, int64_t total) {
    const PyGILState_STATE gil = PyGILState_Ensure();
    PyObject* result = PyObject_CallFunction(fn, "LL", static_cast<long long>(done), static_cast<long long>(total));
    Py_XDECREF(result);
    PyGILState_Release(gil);
    if (!result) throw py::PythonError{};
  };
}

// estimate() closed-form, simulate() by trace; the GIL is released while either runs.
template <bool kSimulate>
Traffic model(const Topology& topo, int64_t batch, int64_t num_q_heads, int64_t num_kv_heads, int64_t seqlen_q,
              int64_t seqlen_k, int64_t head_dim, int elem_bytes, bool causal, int block_m, int block_n,
              std::vector<int64_t> seqlens_q, std::vector<int64_t> seqlens_k, const std::string& mapping,
              int mapping_xcds, std::optional<Ref> progress) {
  const AttnShape s = shape_of(batch, num_q_heads, num_kv_heads, seqlen_q, seqlen_k, head_dim, elem_bytes, causal,
                               block_m, block_n, std::move(seqlens_q), std::move(seqlens_k));
  const Mapping policy = policy_by_name(mapping);
  const int xcds = xcds_or_domains(mapping_xcds, topo);
  validate(topo);
  const std::function<void(int64_t, int64_t)> callback = progress_callback(progress);
  py::GilReleased released;
  return kSimulate ? simulate(topo, s, policy, xcds, callback) : estimate(topo, s, policy, xcds);
}

std::pair<std::string, Ref> choose(const Topology& topo, int64_t batch, int64_t num_q_heads, int64_t num_kv_heads,
                                   int64_t seqlen_q, int64_t seqlen_k, int64_t head_dim, int elem_bytes, bool causal,
                                   int block_m, int block_n, std::vector<int64_t> seqlens_q,
                                   std::vector<int64_t> seqlens_k) {
  const AttnShape s = shape_of(batch, num_q_heads, num_kv_heads, seqlen_q, seqlen_k, head_dim, elem_bytes, causal,
                               block_m, block_n, std::move(seqlens_q), std::move(seqlens_k));
  const AutoChoice c = choose_mapping(s, topo);
  Ref predicted = py::dict({});
  for (int i = 0; i < kNumMappings; ++i)
    if (c.candidate[size_t(i)]) py::set_item(predicted, kMappingNames[i], py::to_py(c.predicted[size_t(i)]));
  return {kMappingNames[int(c.mapping)], predicted};
}

std::tuple<int64_t, int64_t, std::vector<int64_t>, std::vector<int64_t>> auto_lengths(
    int64_t batch, int64_t max_seqlen_q, int64_t max_seqlen_k, int64_t total_q, int64_t total_k,
    const std::optional<std::vector<int32_t>>& cu_seqlens_q,
    const std::optional<std::vector<int32_t>>& cu_seqlens_k) {
  AttnShape s{batch, 1, 1, max_seqlen_q, max_seqlen_k, 1};
  const bool host = cu_seqlens_q && cu_seqlens_k && int64_t(cu_seqlens_q->size()) == batch + 1 &&
                    int64_t(cu_seqlens_k->size()) == batch + 1;
  describe_packed(s, host ? cu_seqlens_q->data() : nullptr, host ? cu_seqlens_k->data() : nullptr, total_q, total_k);
  return {s.seqlen_q, s.seqlen_k, s.seqlens_q, s.seqlens_k};
}

// The trace the simulator replays, per dispatch domain: (q_bytes, [K/V pair keys]) per workgroup.
using Streams = std::vector<std::vector<std::pair<int64_t, std::vector<int64_t>>>>;

Streams streams_of(const Topology& topo, int64_t batch, int64_t num_q_heads, int64_t num_kv_heads, int64_t seqlen_q,
                   int64_t seqlen_k, int64_t head_dim, int elem_bytes, bool causal, int block_m, int block_n,
                   std::vector<int64_t> seqlens_q, std::vector<int64_t> seqlens_k, const std::string& mapping,
                   int mapping_xcds) {
  const AttnShape s = shape_of(batch, num_q_heads, num_kv_heads, seqlen_q, seqlen_k, head_dim, elem_bytes, causal,
                               block_m, block_n, std::move(seqlens_q), std::move(seqlens_k));
  Streams out;
  for (const auto& domain : model_streams(topo, s, policy_by_name(mapping), xcds_or_domains(mapping_xcds, topo))) {
    auto& o = out.emplace_back();
    for (const WorkgroupStream& w : domain) o.emplace_back(w.q_bytes, w.pairs);
  }
  return out;
}

Traffic replay_streams(const Topology& topo, int64_t batch, int64_t num_q_heads, int64_t num_kv_heads,
                       int64_t seqlen_q, int64_t seqlen_k, int64_t head_dim, int elem_bytes, bool causal, int block_m,
                       int block_n, std::vector<int64_t> seqlens_q, std::vector<int64_t> seqlens_k,
                       const Streams& streams) {
  const AttnShape s = shape_of(batch, num_q_heads, num_kv_heads, seqlen_q, seqlen_k, head_dim, elem_bytes, causal,
                               block_m, block_n, std::move(seqlens_q), std::move(seqlens_k));
  DomainStreams in;
  for (const auto& domain : streams) {
    auto& d = in.emplace_back();
    for (const auto& [q_bytes, pairs] : domain) d.push_back(WorkgroupStream{q_bytes, pairs});
  }
  validate(topo);
  py::GilReleased released;
  return simulate_streams(topo, s, in);
}

// ---- How many L2 domains (XCDs) the op assumes for a device, and why: (num_xcds, source, assumed).

std::tuple<int, std::string, bool> as_tuple(const XcdDetection& d) { return {d.num_xcds, d.source, d.assumed}; }

std::tuple<int, std::string, bool> rocm_rule(const std::string& kfd_root, int64_t device_index,
                                             std::optional<std::string> env_override,
                                             std::optional<std::string> visible_devices, int64_t cu_count,
                                             const std::string& arch) {
  return as_tuple(detect_xcds_rocm(kfd_root, device_index, env_override, visible_devices, cu_count, arch));
}

std::tuple<int, std::string, bool> device_xcds(const std::string& device) {
  const DeviceName d = parse_device(device);
  return d.gpu ? as_tuple(detect_xcds(gpu_ordinal(d))) : std::tuple<int, std::string, bool>{1, "CPU: one domain", false};
}

constexpr const char* kSimulateDoc =
    "Trace-driven simulation: every K/V tile read of the FA2 forward through per-domain "
    "set-associative LRU caches. Returns byte counts, hit_rate (all L2 traffic, as Nsight) and "
    "kv_hit_rate. seqlens_q/seqlens_k: per-sequence lengths of a packed batch (batch entries "
    "each; empty: every sequence has seqlen_q/seqlen_k, which are otherwise bounds). "
    "progress(done, total) is called about every 0.1 s.";

void add_model(PyObject* m) {
  py::def(m, "presets", presets, {}, "Topology presets (MI300X, MI300A, MI308X, MI355X, H100, H200)");
  py::def(m, "preset", preset, {arg("name")}, "A topology preset by name (case-insensitive)");
  py::def(m, "topology_for_domains", for_domains, {arg("num_domains")},
          "Topology the auto policy assumes for a device with this many L2 domains");
  const auto model_args = [] {
    std::vector<py::Arg> a = with_shape_args({arg("topology")});
    a.push_back(arg("mapping", "swizzled_head_first"));
    a.push_back(arg("mapping_xcds", -1));
    return a;
  };
  std::vector<py::Arg> with_progress = model_args();
  with_progress.push_back(py::arg_none("progress"));
  py::def(m, "estimate", model<false>, with_progress,
          "Closed-form estimate of the same quantities (see docs/l2_model.md).");
  py::def(m, "simulate", model<true>, std::move(with_progress), kSimulateDoc);
  py::def(m, "choose_mapping", choose, with_shape_args({arg("topology")}),
          "The auto policy's choice (the op's, cached per shape) and its prediction per candidate");
  py::def(m, "auto_lengths", auto_lengths,
          {arg("batch"), arg("max_seqlen_q"), arg("max_seqlen_k"), arg("total_q"), arg("total_k"),
           py::arg_none("cu_seqlens_q"), py::arg_none("cu_seqlens_k")},
          "The lengths the op's mapping='auto' decides a packed batch with: (seqlen_q, seqlen_k, seqlens_q, "
          "seqlens_k); exact from cu_seqlens read on the host, the mean length without them (a GPU's)");
  py::def(m, "model_streams", streams_of, model_args(),
          "The per-domain streams simulate() replays: [(q_bytes, [pair keys: acc * num_n_blocks + n_block])] per "
          "domain");
  std::vector<py::Arg> replay_args = with_shape_args({arg("topology")});
  replay_args.push_back(arg("streams"));
  py::def(m, "simulate_streams", replay_streams, std::move(replay_args),
          "simulate() on given per-domain streams (as model_streams returns them) instead of the model's own");
}

void add_detection(PyObject* m) {
  py::def(m, "detect_xcds_rocm", rocm_rule,
          {arg("kfd_root"), arg("device_index", 0), py::arg_none("env_override"), py::arg_none("visible_devices"),
           arg("cu_count", 0), arg("arch", "")},
          "The ROCm XCD-count rule with explicit inputs: (num_xcds, source, assumed)");
  py::def(m, "detect_xcds", device_xcds, {arg("device")},
          "XCD count the op uses for a device: (num_xcds, source, assumed)");
}

}  // namespace

void add_locality(PyObject* root) {
  PyObject* m = py::add_submodule(root, "locality", "L2 locality model (csrc/locality)");
  add_topology(m);
  add_model(m);
  add_detection(m);
}

}  // namespace chiplet_fa::locality
