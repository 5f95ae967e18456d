// chiplet_fa._C on CPython's limited API (abi3): loading it registers the operators (static
// initialisers of the other translation units of the library) and exposes the mapping function,
// the build's description and the kernel family a device runs, for the Python package, tests and
// tools. Keyword arguments and defaults are declared with each function (python/function.h).
#include <algorithm>
#include <stdexcept>
#include <thread>

#include "build_config.h"

#include "cpu/cpu_backend.h"
#include "kernels/tail_split.h"
#include "kernels/trace.h"
#include "locality/auto_policy.h"
#include "mapping/domain_queues.h"
#include "mapping/mapping.h"
#include "mapping/mapping_names.h"
#include "mapping/topology.h"
#include "python/bindings.h"
#include "python/device.h"
#include "python/function.h"
#include "python/tensor.h"
#if CHIPLET_FA_GPU
#include "ops/gpu/device_family.h"
#endif
#if defined(CFA_EMULATE)
#include "ops/emulated/emulated_kernels.h"
#endif

namespace chiplet_fa {
namespace {

using py::arg;
using py::Ref;

template <class... T>
[[noreturn]] void value_error(const T&... parts) {
  std::string message;
  ((message += parts), ...);
  throw std::invalid_argument(message);
}

std::string str(int64_t v) { return std::to_string(v); }

// The mapping a name selects; "auto" asks the L2 model for the shape (as the op does).
Mapping mapping_for(const std::string& name, int num_xcds, const locality::AttnShape& shape) {
  if (name == "auto") return locality::choose_mapping(shape, num_xcds).mapping;
  if (const std::optional<Mapping> m = mapping_by_name(name)) return *m;
  value_error("mapping must be one of 'auto', 'block_first', 'head_first', 'swizzled_block_first', "
              "'swizzled_head_first'; got '", name, "'");
}

// blocks_per_sequence: a ragged grid's m-blocks per sequence, validated; the grid's offsets.
std::vector<int32_t> sequence_offsets(const std::vector<int64_t>& blocks_per_sequence, int64_t batch,
                                      int64_t num_m_blocks) {
  if (int64_t(blocks_per_sequence.size()) != batch)
    value_error("map_workgroups: blocks_per_sequence has ", str(int64_t(blocks_per_sequence.size())),
                " entries for batch ", str(batch));
  std::vector<int32_t> offsets{0};
  for (int64_t m : blocks_per_sequence) {
    if (m < 0 || m > num_m_blocks)
      value_error("map_workgroups: blocks_per_sequence entries must be in 0..", str(num_m_blocks),
                  " (num_m_blocks), got ", str(m));
    if (offsets.back() + m > INT32_MAX) value_error("map_workgroups: total blocks exceed int32");
    offsets.push_back(int32_t(offsets.back() + m));
  }
  return offsets;
}

// Rows (batch, q_head, m_block) of workgroups [begin, end).
void fill_rows(const Mapping p, const GridShape& g, int64_t begin, int64_t end, int64_t* rows) {
  for (int64_t wid = begin; wid < end; ++wid) {
    const Tile t = map_workgroup(p, wid, g);
    rows[3 * wid] = t.batch;
    rows[3 * wid + 1] = t.q_head;
    rows[3 * wid + 2] = t.m_block;
  }
}

// blocks_per_sequence: a ragged grid (variable-length batch) with these m-blocks per sequence;
// batch must be its length and num_m_blocks at least its largest entry.
Ref map_workgroups(const std::string& policy, int64_t batch, int64_t num_q_heads, int64_t num_kv_heads,
                   int64_t num_m_blocks, int64_t num_xcds, int64_t seqlen_k, int64_t head_dim, int64_t elem_bytes,
                   bool causal, int64_t section_rows, bool first_blocks_longest,
                   std::optional<std::vector<int64_t>> blocks_per_sequence) {
  if (batch < 0 || batch > INT32_MAX || num_m_blocks < 0 || num_m_blocks > INT32_MAX)
    value_error("map_workgroups: batch and num_m_blocks must be in 0..2^31 - 1, got ", str(batch), " and ",
                str(num_m_blocks));
  if (num_q_heads < 1 || num_kv_heads < 1 || num_q_heads % num_kv_heads != 0)
    value_error("map_workgroups: num_q_heads (", str(num_q_heads), ") must be a positive multiple of num_kv_heads (",
                str(num_kv_heads), ")");
  if (num_q_heads > INT32_MAX)
    value_error("map_workgroups: num_q_heads must be at most 2^31 - 1, got ", str(num_q_heads));
  if (num_xcds < 1 || num_xcds > kMaxXcds)
    value_error("map_workgroups: num_xcds must be in 1..", str(kMaxXcds), ", got ", str(num_xcds));
  if (section_rows < 1 || section_rows > INT32_MAX)
    value_error("map_workgroups: section_rows must be >= 1, got ", str(section_rows));
  const std::vector<int32_t> offsets =
      blocks_per_sequence ? sequence_offsets(*blocks_per_sequence, batch, num_m_blocks) : std::vector<int32_t>{};
  // "auto" needs the attention shape: the grid is num_m_blocks tiles of the GPU kernel's
  // 128 rows; seqlen_k defaults to the same length.
  locality::AttnShape shape{batch, num_q_heads, num_kv_heads, num_m_blocks * 128,
                            seqlen_k < 0 ? num_m_blocks * 128 : seqlen_k, head_dim};
  shape.elem_bytes = int32_t(elem_bytes);
  shape.causal = causal;
  const Mapping p = mapping_for(policy, int(num_xcds), shape);
  // causal: the order the kernels run a causal call in (head-first orders: sections of section_rows
  // rows, longest tiles first: the last blocks, or the first with first_blocks_longest).
  const GridShape g{int32_t(batch), int32_t(num_q_heads), int32_t(num_m_blocks), int32_t(num_xcds),
                    blocks_per_sequence ? offsets.data() : nullptr, causal ? int32_t(section_rows) : 0,
                    first_blocks_longest};
  const int64_t grid = grid_size(g);
  if (grid > INT32_MAX) value_error("map_workgroups: grid of ", str(grid), " exceeds int32");
  py::NewTensor rows = py::empty_tensor({grid, 3}, "int64");
  int64_t* r = static_cast<int64_t*>(rows.data);
  const int64_t workers = std::clamp<int64_t>(grid / 65536, 1, std::max(1u, std::thread::hardware_concurrency()));
  {
    py::GilReleased released;
    std::vector<std::thread> pool;
    for (int64_t w = 1; w < workers; ++w)
      pool.emplace_back(fill_rows, p, g, grid * w / workers, grid * (w + 1) / workers, r);
    fill_rows(p, g, 0, grid / workers, r);
    for (std::thread& t : pool) t.join();
  }
  return std::move(rows.tensor);
}

int64_t longest_first_section_rows(int64_t rows, int64_t m_blocks, int64_t workers, int64_t bytes_per_head,
                                   int64_t group, int64_t l2_bytes) {
  if (rows < 1 || m_blocks < 1 || workers < 1 || bytes_per_head < 0 || group < 1 || l2_bytes < 0)
    value_error("longest_first_section_rows: rows, m_blocks, workers and group must be >= 1, the bytes >= 0");
  return chiplet_fa::longest_first_section_rows(rows, m_blocks, workers, bytes_per_head, group, l2_bytes);
}

Ref tail_split(int64_t tiles, int64_t workers, int32_t tile_blocks) {
  if (tiles < 0 || workers < 1 || tile_blocks < 0)
    value_error("tail_split: tiles and tile_blocks must be >= 0, workers >= 1");
  const FwdTailSplit s = plan_tail_split(tiles, workers, tile_blocks);
  std::vector<std::tuple<int32_t, int32_t, int32_t, int32_t, int32_t>> pieces;
  for (int32_t u = 0; u < s.units; ++u)
    for (int k = 0; k < 2; ++k) {
      const TailPiece t = unit_piece(s, u, k);
      if (!t.empty()) pieces.emplace_back(u, t.tile, t.first, t.end, t.slot);
    }
  std::vector<std::vector<int32_t>> slots;
  for (int32_t i = 0; i < s.tail; ++i) {
    const TileSlots t = tile_slots(s, i);
    std::vector<int32_t>& of_tile = slots.emplace_back();
    for (int32_t k = 0; k < t.count(); ++k) of_tile.push_back(t.slot(k));
  }
  return py::dict({{"first", py::to_py(s.first)}, {"units", py::to_py(s.units)}, {"tail", py::to_py(s.tail)},
                   {"pieces", py::to_py(pieces)}, {"tile_slots", py::to_py(slots)}});
}

// The persistent workers' walk over the domains' queues (mapping/domain_queues.h) on a device of
// `sms` multiprocessors: the worker count, then every claim in the order `turns` interleaves the
// workers (turns[k] % live workers picks who claims next; then each in turn) as (worker, wid).
std::pair<int64_t, std::vector<std::pair<int64_t, int64_t>>> walk_domain_queues(int64_t tiles, int64_t sms,
                                                                                  int64_t domains,
                                                                                  std::vector<int64_t> turns) {
  if (tiles < 0 || tiles > INT32_MAX || sms < 0 || domains < 1 || domains > kMaxXcds)
    value_error("walk_domain_queues: tiles in 0..2^31 - 1, sms >= 0, domains in 1..", str(kMaxXcds));
  const int64_t workers = persistent_worker_count(tiles, sms, domains);
  std::vector<int32_t> counters(size_t(domains), 0);
  std::vector<QueueWalk> walks;
  std::vector<int64_t> live;
  for (int64_t w = 0; w < workers; ++w) {
    walks.emplace_back(tiles, domains, workers, w);
    live.push_back(w);
  }
  std::vector<std::pair<int64_t, int64_t>> claims;
  for (size_t k = 0; !live.empty(); ++k) {
    const size_t at = size_t(k < turns.size() ? turns[k] : int64_t(k)) % live.size();
    const int64_t w = live[at];
    const int64_t wid = walks[size_t(w)].next([&counters](int32_t d) { return counters[size_t(d)]++; });
    if (wid < 0) live.erase(live.begin() + int64_t(at));
    else claims.emplace_back(w, wid);
  }
  return {workers, claims};
}

Ref build_info() {
  return py::dict({{"backend", py::to_py(CHIPLET_FA_BACKEND)},
                   {"emulate", py::to_py(CHIPLET_FA_EMULATE)},
                   {"archs", py::to_py(CHIPLET_FA_GPU_ARCHS)},
                   {"instantiations", py::to_py(CHIPLET_FA_INSTANTIATIONS)},
                   {"cxx_compiler", py::to_py(CHIPLET_FA_CXX_COMPILER)},
                   {"gpu_compiler", py::to_py(CHIPLET_FA_GPU_COMPILER)},
                   {"torch", py::to_py(CHIPLET_FA_TORCH_VERSION)},
                   {"cxx_runtime", py::to_py(CHIPLET_FA_CXX_RUNTIME)},
                   {"trace", py::to_py(kTrace)}});
}

// A traced build (kernels/trace.h): the sm90 launches that follow record into the zeroed int32
// buffer at `words` (kTraceWords a event, workgroups * kTraceRoles * slots events); 0 stops it.
void trace_set(uint64_t words, int64_t workgroups, int64_t slots) {
  if (!kTrace)
    throw std::runtime_error("chiplet_fa._C._trace_set: this build records no traces (build with CHIPLET_FA_TRACE=1)");
  if (workgroups < 0 || workgroups > INT32_MAX || slots < 0 || slots > INT32_MAX)
    value_error("_trace_set: workgroups and slots must be in 0..2^31-1, got ", str(workgroups), " and ", str(slots));
  if (words % 16 != 0) value_error("_trace_set: the buffer must be 16-byte aligned");
  trace_sink() = words ? TraceSink{reinterpret_cast<uint32_t*>(words), int32_t(workgroups), int32_t(slots)}
                       : TraceSink{};
}

[[noreturn]] void no_gpu_kernels(const DeviceName& d) {
  throw std::runtime_error(std::string("chiplet_fa was built for the CPU only (backend ") + CHIPLET_FA_BACKEND +
                           "); no kernels for " + d.text);
}

int num_l2_domains(const std::string& device) {
  const DeviceName d = parse_device(device);
  return d.gpu ? detect_num_xcds(gpu_ordinal(d)) : 1;
}

// The kernel family a call on `device` runs: "cpu" on the CPU (in an emulated build, with the
// calls that run the emulated cdna3 kernels named), else the GPU family chosen for it.
std::string kernel_path(const std::string& device) {
  const DeviceName d = parse_device(device);
#if defined(CFA_EMULATE)
  if (!d.gpu) return "cpu (float16/bfloat16 with a head dim the cdna3 kernels cover: cdna3, emulated)";
#else
  if (!d.gpu) return "cpu";
#endif
#if CHIPLET_FA_GPU
  return chiplet_fa::kernel_path(gpu_ordinal(d));
#else
  no_gpu_kernels(d);
#endif
}

// Query rows per forward tile of the kernel a call with q runs (the CPU kernel's, an emulated or a
// GPU family's): what its grid and mapping="auto" are sized with, so explain() models the same.
int fwd_tile_rows(Ref q) {
  const py::TensorInfo t = py::tensor_info(q.get(), {"fwd_tile_rows", "q"});
  if (t.cuda) {
#if CHIPLET_FA_GPU
    return chiplet_fa::fwd_tile_rows(py::dtype_named(t.dtype), t.last_size, t.device_index);
#else
    no_gpu_kernels({true, t.device_index, t.device_index < 0 ? "cuda" : "cuda:" + str(t.device_index)});
#endif
  }
#if defined(CFA_EMULATE)
  if (t.dim >= 3 && (t.dtype == "float16" || t.dtype == "bfloat16")) {
    const int rows = emulated_fwd_tile(py::dtype_named(t.dtype), int(t.last_size)).first;
    if (rows > 0) return rows;
  }
#endif
  return kCpuBlockM;
}

void add_functions(PyObject* m) {
  py::def(m, "map_workgroups", map_workgroups,
          {arg("policy"), arg("batch"), arg("num_q_heads"), arg("num_kv_heads"), arg("num_m_blocks"), arg("num_xcds"),
           arg("seqlen_k", -1), arg("head_dim", 128), arg("elem_bytes", 2), arg("causal", false),
           arg("section_rows", 1), arg("first_blocks_longest", false), py::arg_none("blocks_per_sequence")},
          "Rows (batch, q_head, m_block) of every workgroup id, computed by the kernels' function");
  py::def(m, "longest_first_section_rows", longest_first_section_rows,
          {arg("rows"), arg("m_blocks"), arg("workers"), arg("bytes_per_head"), arg("group"), arg("l2_bytes")},
          "Rows per longest-first section the kernels choose (mapping.h)");
  py::def(m, "tail_split", tail_split, {arg("tiles"), arg("workers"), arg("tile_blocks")},
          "The sm90 forward's split of its last partial round (kernels/tail_split.h): the plan, each unit's "
          "pieces (unit, tail tile, first block, end block, slot) and each tail tile's slots in merge order");
  py::def(m, "walk_domain_queues", walk_domain_queues,
          {arg("tiles"), arg("sms"), arg("domains"), arg("turns", std::vector<int64_t>{})},
          "The persistent forward's workers and their claims (worker, wid), interleaved by turns "
          "(mapping/domain_queues.h)");
  py::def(m, "num_l2_domains", num_l2_domains, {arg("device")},
          "L2 domains the op detects on device: what num_xcds=-1 resolves to");
  py::def(m, "build_info", build_info, {}, "What this build holds (backend, archs, instantiations, compilers)");
  py::def(m, "_trace_set", trace_set, {arg("words"), arg("workgroups"), arg("slots")},
          "A traced build: where the sm90 kernels record their timelines (bench/trace.py); words=0 stops");
  py::def(m, "fwd_tile_rows", fwd_tile_rows, {arg("q")},
          "Query rows per forward tile of the kernel a call with q runs");
  py::def(m, "kernel_path", kernel_path, {arg("device")},
          "The kernel family a call on `device` runs, with the device it was chosen for");
  std::vector<std::string> names(kMappingNames, kMappingNames + kNumMappings);
  Ref mapping_names = py::check(PyList_AsTuple(py::to_py(names).get()));
  if (PyModule_AddObjectRef(m, "mapping_names", mapping_names.get()) < 0) throw py::PythonError{};
}

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C",
                          "chiplet_fa native module: operators are registered under torch.ops.chiplet_fa", -1,
                          nullptr, nullptr, nullptr, nullptr, nullptr};

}  // namespace
}  // namespace chiplet_fa

PyMODINIT_FUNC PyInit__C() {
  PyObject* m = PyModule_Create(&chiplet_fa::module_def);
  if (!m) return nullptr;
  try {
    chiplet_fa::add_functions(m);
    chiplet_fa::locality::add_locality(m);
#if defined(CFA_EMULATE)
    chiplet_fa::add_emulate(m);
#endif
  } catch (...) {
    Py_DECREF(m);
    return chiplet_fa::py::raise_current_exception();
  }
  return m;
}
