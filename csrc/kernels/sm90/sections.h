// The longest-first sections (mapping.h) of the sm90 kernels' causal grids, sized for what runs at
// once: the forward's persistent workers, the backward's resident key-block workgroups. Each
// domain's workers share that domain's part of the L2 (the whole L2 with one queue).
#pragma once
#include <cstdint>

#include "kernels/bwd_params.h"
#include "kernels/sm90/tile_scheduler.h"

namespace chiplet_fa::CFA_FAMILY {

// The forward: a row is a query head's blocks, reading one KV head's K and V (group query heads to one).
inline FwdParams with_sections(FwdParams p, int64_t workers, int domains, int elem_bytes) {
  if (!p.longest_first() || p.batch <= 0) return p;
  const int64_t kv_bytes = 2 * int64_t(p.seqlen_k) * p.head_dim * elem_bytes;
  const int64_t rows = int64_t(p.batch) * p.num_q_heads, blocks = mean_row_blocks(p.total_q, p.batch, p.block_m);
  p.section_rows = longest_first_section_rows(rows, blocks, workers / domains, kv_bytes, p.group_size(),
                                              device_counts().l2_bytes / domains);
  return p;
}

// The backward's key-block grid: a row is a KV head's blocks (or a split's), streaming Q and dO of
// its query heads and adding into their fp32 dQ. `resident` workgroups run at once on the device.
inline BwdParams with_kv_sections(BwdParams p, int64_t resident, int elem_bytes) {
  if (!p.longest_first() || p.batch <= 0 || resident <= 0) return p;
  const int domains = scheduler_domains(p);
  const int64_t row_bytes = p.kv_row_bytes(elem_bytes);
  const int64_t rows = int64_t(p.batch) * p.num_kv_heads * p.kv_split;
  const int64_t blocks = mean_row_blocks(p.total_k, p.batch, p.block_n);
  p.section_rows = longest_first_section_rows(rows, blocks, resident / domains, row_bytes, 1,
                                              device_counts().l2_bytes / domains);
  return p;
}

}  // namespace chiplet_fa::CFA_FAMILY
