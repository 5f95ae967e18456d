#include "workload.h"

#include <stdexcept>
#include <string>

namespace chiplet_fa::locality {
namespace {

// The lengths of a packing of `total` rows into `batch` sequences of at most max_len rows each
// (cu[0] == 0, non-decreasing, cu[batch] == total); empty when cu is not one.
std::vector<int64_t> packed_lengths(const int32_t* cu, int64_t batch, int64_t total, int64_t max_len) {
  if (cu[0] != 0 || cu[batch] != total) return {};
  std::vector<int64_t> lens(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    lens[size_t(b)] = int64_t(cu[b + 1]) - cu[b];
    if (lens[size_t(b)] < 0 || lens[size_t(b)] > max_len) return {};
  }
  return lens;
}

}  // namespace

void validate(const AttnShape& s) {
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument("attention shape: " + what);
  };
  need(s.batch >= 0 && s.seqlen_q >= 0 && s.seqlen_k >= 0, "batch, seqlen_q and seqlen_k must be >= 0");
  need(s.head_dim >= 1, "head_dim must be >= 1");
  need(s.num_kv_heads >= 1 && s.num_q_heads >= 1 && s.num_q_heads % s.num_kv_heads == 0,
       "num_q_heads (" + std::to_string(s.num_q_heads) + ") must be a positive multiple of num_kv_heads (" +
           std::to_string(s.num_kv_heads) + ")");
  need(s.elem_bytes >= 1 && s.block_m >= 1 && s.block_n >= 1, "elem_bytes, block_m and block_n must be >= 1");
  need(s.batch <= INT32_MAX && s.num_q_heads <= INT32_MAX, "batch and num_q_heads must fit in int32");
  if (s.varlen()) {
    need(int64_t(s.seqlens_q.size()) == s.batch && int64_t(s.seqlens_k.size()) == s.batch,
         "seqlens_q and seqlens_k must both have batch (" + std::to_string(s.batch) + ") entries, got " +
             std::to_string(s.seqlens_q.size()) + " and " + std::to_string(s.seqlens_k.size()));
    auto within = [&](const std::vector<int64_t>& lens, const std::string& name, int64_t bound, const char* bound_name) {
      for (size_t b = 0; b < lens.size(); ++b)
        need(lens[b] >= 0 && lens[b] <= bound, name + "[" + std::to_string(b) + "] = " + std::to_string(lens[b]) +
                                                    " must be in 0.." + bound_name + " (" + std::to_string(bound) +
                                                    ", at least the longest sequence)");
    };
    within(s.seqlens_q, "seqlens_q", s.seqlen_q, "seqlen_q");
    within(s.seqlens_k, "seqlens_k", s.seqlen_k, "seqlen_k");
  }
  need(s.grid() <= INT32_MAX, "grid of " + std::to_string(s.grid()) + " workgroups exceeds int32");
}

void describe_packed(AttnShape& s, const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_k, int64_t total_q,
                     int64_t total_k) {
  if (cu_seqlens_q && cu_seqlens_k) {
    s.seqlens_q = packed_lengths(cu_seqlens_q, s.batch, total_q, s.seqlen_q);
    s.seqlens_k = packed_lengths(cu_seqlens_k, s.batch, total_k, s.seqlen_k);
    if (!s.seqlens_q.empty() && !s.seqlens_k.empty()) return;
  }
  s.seqlens_q.clear();
  s.seqlens_k.clear();
  s.seqlen_q = s.batch ? (total_q + s.batch - 1) / s.batch : 0;
  s.seqlen_k = s.batch ? (total_k + s.batch - 1) / s.batch : 0;
}

}  // namespace chiplet_fa::locality
