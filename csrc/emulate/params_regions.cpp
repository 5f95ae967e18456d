#include "emulate/params_regions.h"

namespace chiplet_fa {
namespace {

constexpr int64_t kElemBytes = 2;

emu::Region region(const char* name, const void* base, int64_t batch, int64_t rows, int64_t heads, int64_t cols,
                   int64_t batch_stride, int64_t row_stride, int64_t head_stride) {
  return {name, static_cast<const unsigned char*>(base), kElemBytes,
          {batch, rows, heads, cols}, {batch_stride, row_stride, head_stride, 1}};
}

}  // namespace

// A packed batch's tensors are (rows, heads, cols) with batch stride 0: their rows are all of
// total_q (total_k) rows; a dense batch's rows are per sequence.
void add_regions(std::vector<emu::Region>& regions, const FwdParams& p) {
  const int64_t rows_q = p.cu_seqlens_q ? p.total_q : p.seqlen_q, rows_k = p.cu_seqlens_k ? p.total_k : p.seqlen_k;
  regions.push_back(region("q", p.q, p.batch, rows_q, p.num_q_heads, p.head_dim, p.q_batch_stride, p.q_row_stride,
                           p.q_head_stride));
  regions.push_back(region("k", p.k, p.batch, rows_k, p.num_kv_heads, p.head_dim, p.k_batch_stride, p.k_row_stride,
                           p.k_head_stride));
  regions.push_back(region("v", p.v, p.batch, rows_k, p.num_kv_heads, p.head_dim, p.v_batch_stride, p.v_row_stride,
                           p.v_head_stride));
}

void add_regions(std::vector<emu::Region>& regions, const BwdParams& p) {
  add_regions(regions, static_cast<const FwdParams&>(p));
  const int64_t rows_q = p.cu_seqlens_q ? p.total_q : p.seqlen_q;
  regions.push_back(region("dout", p.dout, p.batch, rows_q, p.num_q_heads, p.head_dim, p.do_batch_stride,
                           p.do_row_stride, p.do_head_stride));
}

void add_regions(std::vector<emu::Region>& regions, const DecodeParams& p) {
  const int64_t row = int64_t(p.num_q_heads) * p.head_dim;  // the rotated copy is dense
  if (p.rotary_dim > 0)
    regions.push_back(region("q", p.q_rotated, p.batch, p.seqlen_q, p.num_q_heads, p.head_dim, p.seqlen_q * row, row,
                             p.head_dim));
  else
    regions.push_back(region("q", p.q, p.batch, p.seqlen_q, p.num_q_heads, p.head_dim, p.q_batch_stride,
                             p.q_row_stride, p.q_head_stride));
  regions.push_back(region("k_cache", p.k_cache, p.cache_entries, p.cache_rows, p.num_kv_heads, p.head_dim,
                           p.k_batch_stride, p.k_row_stride, p.k_head_stride));
  regions.push_back(region("v_cache", p.v_cache, p.cache_entries, p.cache_rows, p.num_kv_heads, p.head_dim,
                           p.v_batch_stride, p.v_row_stride, p.v_head_stride));
}

}  // namespace chiplet_fa
