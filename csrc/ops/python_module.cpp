// pybind11 module chiplet_fa._C: loading it registers the operators (static initialisers of
// the other translation units) and exposes the mapping function, the build's description and the
// kernel family a device runs, for the Python package, tests and tools.
#include <torch/extension.h>

#include "build_config.h"

#include "cpu/cpu_backend.h"
#include "kernels/tail_split.h"
#include "kernels/trace.h"
#include "locality/bind_locality.h"
#include "mapping/domain_queues.h"
#include "mapping/mapping.h"
#include "mapping/topology.h"
#include "ops/resolve_mapping.h"
#if CHIPLET_FA_GPU
#include "ops/gpu/device_family.h"
#endif
#if defined(CFA_EMULATE)
#include "ops/emulated/bind_emulate.h"
#include "ops/emulated/emulated_kernels.h"
#endif

namespace chiplet_fa {
namespace {

// blocks_per_sequence: a ragged grid (variable-length batch) with these m-blocks per sequence;
// batch must be its length and num_m_blocks at least its largest entry.
at::Tensor map_workgroups(const std::string& policy, int64_t batch, int64_t num_q_heads,
                          int64_t num_kv_heads, int64_t num_m_blocks, int64_t num_xcds,
                          int64_t seqlen_k, int64_t head_dim, int64_t elem_bytes, bool causal,
                          int64_t section_rows, bool first_blocks_longest,
                          const std::optional<std::vector<int64_t>>& blocks_per_sequence) {
  TORCH_CHECK_VALUE(batch >= 0 && batch <= INT32_MAX && num_m_blocks >= 0 && num_m_blocks <= INT32_MAX,
                    "map_workgroups: batch and num_m_blocks must be in 0..2^31 - 1, got ", batch, " and ",
                    num_m_blocks);
  TORCH_CHECK_VALUE(num_q_heads >= 1 && num_kv_heads >= 1 && num_q_heads % num_kv_heads == 0,
                    "map_workgroups: num_q_heads (", num_q_heads,
                    ") must be a positive multiple of num_kv_heads (", num_kv_heads, ")");
  TORCH_CHECK_VALUE(num_q_heads <= INT32_MAX, "map_workgroups: num_q_heads must be at most 2^31 - 1, got ",
                    num_q_heads);
  TORCH_CHECK_VALUE(num_xcds >= 1 && num_xcds <= kMaxXcds, "map_workgroups: num_xcds must be in 1..", kMaxXcds,
                    ", got ", num_xcds);
  TORCH_CHECK_VALUE(section_rows >= 1 && section_rows <= INT32_MAX,
                    "map_workgroups: section_rows must be >= 1, got ", section_rows);
  std::vector<int32_t> offsets;
  if (blocks_per_sequence) {
    TORCH_CHECK_VALUE(int64_t(blocks_per_sequence->size()) == batch, "map_workgroups: blocks_per_sequence has ",
                      blocks_per_sequence->size(), " entries for batch ", batch);
    offsets.push_back(0);
    for (int64_t m : *blocks_per_sequence) {
      TORCH_CHECK_VALUE(m >= 0 && m <= num_m_blocks, "map_workgroups: blocks_per_sequence entries must be in 0..",
                        num_m_blocks, " (num_m_blocks), got ", m);
      TORCH_CHECK_VALUE(offsets.back() + m <= INT32_MAX, "map_workgroups: total blocks exceed int32");
      offsets.push_back(int32_t(offsets.back() + m));
    }
  }
  // "auto" needs the attention shape: the grid is num_m_blocks tiles of the GPU kernel's
  // 128 rows; seqlen_k defaults to the same length.
  locality::AttnShape shape{batch, num_q_heads, num_kv_heads, num_m_blocks * 128,
                            seqlen_k < 0 ? num_m_blocks * 128 : seqlen_k, head_dim};
  shape.elem_bytes = int32_t(elem_bytes);
  shape.causal = causal;
  const Mapping p = resolve_mapping(policy, int(num_xcds), shape);
  // causal: the order the kernels run a causal call in (head-first orders: sections of section_rows
  // rows, longest tiles first: the last blocks, or the first with first_blocks_longest).
  const GridShape g{int32_t(batch), int32_t(num_q_heads), int32_t(num_m_blocks), int32_t(num_xcds),
                    blocks_per_sequence ? offsets.data() : nullptr, causal ? int32_t(section_rows) : 0,
                    first_blocks_longest};
  const int64_t grid = grid_size(g);
  TORCH_CHECK_VALUE(grid <= INT32_MAX, "map_workgroups: grid of ", grid, " exceeds int32");
  at::Tensor rows = at::empty({grid, 3}, at::kLong);
  int64_t* r = rows.data_ptr<int64_t>();
  at::parallel_for(0, grid, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t wid = begin; wid < end; ++wid) {
      const Tile t = map_workgroup(p, wid, g);
      r[3 * wid] = t.batch;
      r[3 * wid + 1] = t.q_head;
      r[3 * wid + 2] = t.m_block;
    }
  });
  return rows;
}

py::dict build_info() {
  py::dict d;
  d["backend"] = CHIPLET_FA_BACKEND;
  d["emulate"] = CHIPLET_FA_EMULATE;
  d["archs"] = CHIPLET_FA_GPU_ARCHS;
  d["instantiations"] = CHIPLET_FA_INSTANTIATIONS;
  d["cxx_compiler"] = CHIPLET_FA_CXX_COMPILER;
  d["gpu_compiler"] = CHIPLET_FA_GPU_COMPILER;
  d["torch"] = CHIPLET_FA_TORCH_VERSION;
  d["cxx_runtime"] = CHIPLET_FA_CXX_RUNTIME;
  d["trace"] = kTrace;
  return d;
}

// A traced build (kernels/trace.h): the sm90 launches that follow record into the zeroed int32
// buffer at `words` (kTraceWords a event, workgroups * kTraceRoles * slots events); 0 stops it.
void trace_set(uint64_t words, int64_t workgroups, int64_t slots) {
  TORCH_CHECK(kTrace, "chiplet_fa._C._trace_set: this build records no traces (build with CHIPLET_FA_TRACE=1)");
  TORCH_CHECK_VALUE(workgroups >= 0 && workgroups <= INT32_MAX && slots >= 0 && slots <= INT32_MAX,
                    "_trace_set: workgroups and slots must be in 0..2^31-1, got ", workgroups, " and ", slots);
  TORCH_CHECK_VALUE(words % 16 == 0, "_trace_set: the buffer must be 16-byte aligned");
  trace_sink() = words ? TraceSink{reinterpret_cast<uint32_t*>(words), int32_t(workgroups), int32_t(slots)}
                       : TraceSink{};
}

// The persistent workers' walk over the domains' queues (mapping/domain_queues.h) on a device of
// `sms` multiprocessors: the worker count, then every claim in the order `turns` interleaves the
// workers (turns[k] % live workers picks who claims next; then each in turn) as (worker, wid).
py::tuple walk_domain_queues(int64_t tiles, int64_t sms, int64_t domains, const std::vector<int64_t>& turns) {
  TORCH_CHECK_VALUE(tiles >= 0 && tiles <= INT32_MAX && sms >= 0 && domains >= 1 && domains <= kMaxXcds,
                    "walk_domain_queues: tiles in 0..2^31 - 1, sms >= 0, domains in 1..", kMaxXcds);
  const int64_t workers = persistent_worker_count(tiles, sms, domains);
  std::vector<int32_t> counters(size_t(domains), 0);
  std::vector<QueueWalk> walks;
  std::vector<int64_t> live;
  for (int64_t w = 0; w < workers; ++w) {
    walks.emplace_back(tiles, domains, workers, w);
    live.push_back(w);
  }
  py::list claims;
  for (size_t k = 0; !live.empty(); ++k) {
    const size_t at = size_t(k < turns.size() ? turns[k] : int64_t(k)) % live.size();
    const int64_t w = live[at];
    const int64_t wid = walks[size_t(w)].next([&counters](int32_t d) { return counters[size_t(d)]++; });
    if (wid < 0) live.erase(live.begin() + int64_t(at));
    else claims.append(py::make_tuple(w, wid));
  }
  return py::make_tuple(workers, claims);
}

// The kernel family a call on `device` runs: "cpu" on the CPU (in an emulated build, with the
// calls that run the emulated cdna3 kernels named), else the GPU family chosen for it.
std::string device_kernel_path(const std::string& device) {
  const c10::Device d(device);
#if defined(CFA_EMULATE)
  if (!d.is_cuda()) return "cpu (float16/bfloat16 with a head dim the cdna3 kernels cover: cdna3, emulated)";
#else
  if (!d.is_cuda()) return "cpu";
#endif
#if CHIPLET_FA_GPU
  return kernel_path(d.index());
#else
  TORCH_CHECK(false, "chiplet_fa was built for the CPU only (backend ", CHIPLET_FA_BACKEND, "); no kernels for ", d);
#endif
}

// Query rows per forward tile of the kernel a call with q runs (the CPU kernel's, an emulated or a
// GPU family's): what its grid and mapping="auto" are sized with, so explain() models the same.
int fwd_tile_rows_for(const at::Tensor& q) {
  if (q.is_cuda()) {
#if CHIPLET_FA_GPU
    return fwd_tile_rows(q.scalar_type() == at::kBFloat16 ? DType::kBFloat16 : DType::kFloat16, q.size(-1),
                         q.get_device());
#else
    TORCH_CHECK(false, "chiplet_fa was built for the CPU only (backend ", CHIPLET_FA_BACKEND, "); no kernels for ",
                q.device());
#endif
  }
#if defined(CFA_EMULATE)
  const bool half = q.scalar_type() == at::kHalf || q.scalar_type() == at::kBFloat16;
  if (half && q.dim() >= 3 && emulated_fwd_covers(dtype_of(q.scalar_type()), q.size(-1)))
    return emulated_fwd_tile(dtype_of(q.scalar_type()), int(q.size(-1))).first;
#endif
  return kCpuBlockM;
}

}  // namespace
}  // namespace chiplet_fa

PYBIND11_MODULE(_C, m) {
  m.doc() = "chiplet_fa native module: operators are registered under torch.ops.chiplet_fa";
  m.def("map_workgroups", &chiplet_fa::map_workgroups, py::arg("policy"), py::arg("batch"),
        py::arg("num_q_heads"), py::arg("num_kv_heads"), py::arg("num_m_blocks"),
        py::arg("num_xcds"), py::arg("seqlen_k") = -1, py::arg("head_dim") = 128,
        py::arg("elem_bytes") = 2, py::arg("causal") = false, py::arg("section_rows") = 1,
        py::arg("first_blocks_longest") = false, py::arg("blocks_per_sequence") = py::none(),
        "Rows (batch, q_head, m_block) of every workgroup id, computed by the kernels' function");
  m.def(
      "longest_first_section_rows",
      [](int64_t rows, int64_t m_blocks, int64_t workers, int64_t bytes_per_head, int64_t group, int64_t l2_bytes) {
        TORCH_CHECK_VALUE(rows >= 1 && m_blocks >= 1 && workers >= 1 && bytes_per_head >= 0 && group >= 1 &&
                              l2_bytes >= 0,
                          "longest_first_section_rows: rows, m_blocks, workers and group must be >= 1, the bytes >= 0");
        return chiplet_fa::longest_first_section_rows(rows, m_blocks, workers, bytes_per_head, group, l2_bytes);
      },
      py::arg("rows"), py::arg("m_blocks"), py::arg("workers"), py::arg("bytes_per_head"), py::arg("group"),
      py::arg("l2_bytes"), "Rows per longest-first section the kernels choose (mapping.h)");
  m.def(
      "tail_split",
      [](int64_t tiles, int64_t workers, int32_t tile_blocks) {
        TORCH_CHECK_VALUE(tiles >= 0 && workers >= 1 && tile_blocks >= 0,
                          "tail_split: tiles and tile_blocks must be >= 0, workers >= 1");
        const chiplet_fa::FwdTailSplit s = chiplet_fa::plan_tail_split(tiles, workers, tile_blocks);
        py::list pieces, slots;
        for (int32_t u = 0; u < s.units; ++u)
          for (int k = 0; k < 2; ++k) {
            const chiplet_fa::TailPiece t = chiplet_fa::unit_piece(s, u, k);
            if (!t.empty()) pieces.append(py::make_tuple(u, t.tile, t.first, t.end, t.slot));
          }
        for (int32_t i = 0; i < s.tail; ++i) {
          const chiplet_fa::TileSlots t = chiplet_fa::tile_slots(s, i);
          py::list of_tile;
          for (int32_t k = 0; k < t.count(); ++k) of_tile.append(t.slot(k));
          slots.append(of_tile);
        }
        return py::dict(py::arg("first") = s.first, py::arg("units") = s.units, py::arg("tail") = s.tail,
                        py::arg("pieces") = pieces, py::arg("tile_slots") = slots);
      },
      py::arg("tiles"), py::arg("workers"), py::arg("tile_blocks"),
      "The sm90 forward's split of its last partial round (kernels/tail_split.h): the plan, each unit's "
      "pieces (unit, tail tile, first block, end block, slot) and each tail tile's slots in merge order");
  m.def("walk_domain_queues", &chiplet_fa::walk_domain_queues, py::arg("tiles"), py::arg("sms"), py::arg("domains"),
        py::arg("turns") = std::vector<int64_t>{},
        "The persistent forward's workers and their claims (worker, wid), interleaved by turns "
        "(mapping/domain_queues.h)");
  m.def("num_l2_domains",
        [](const std::string& device) {
          const c10::Device d(device);
          return d.is_cuda() ? chiplet_fa::detect_num_xcds(d.has_index() ? d.index() : 0) : chiplet_fa::kCpuXcds;
        },
        py::arg("device"), "L2 domains the op detects on device: what num_xcds=-1 resolves to");
  m.def("build_info", &chiplet_fa::build_info, "What this build holds (backend, archs, instantiations, compilers)");
  m.def("_trace_set", &chiplet_fa::trace_set, py::arg("words"), py::arg("workgroups"), py::arg("slots"),
        "A traced build: where the sm90 kernels record their timelines (bench/trace.py); words=0 stops");
  m.def("fwd_tile_rows", &chiplet_fa::fwd_tile_rows_for, py::arg("q"),
        "Query rows per forward tile of the kernel a call with q runs");
  m.def("kernel_path", &chiplet_fa::device_kernel_path, py::arg("device"),
        "The kernel family a call on `device` runs, with the device it was chosen for");
  py::tuple names(chiplet_fa::kNumMappings);
  for (int i = 0; i < chiplet_fa::kNumMappings; ++i) names[i] = chiplet_fa::kMappingNames[i];
  m.attr("mapping_names") = names;
  chiplet_fa::locality::bind_locality(m);
#if defined(CFA_EMULATE)
  chiplet_fa::bind_emulate(m);
#endif
}
