// The global memory the attention kernels read through the copy path, from their params (found
// by emu::launch through argument-dependent lookup): q, k and v, and for the backward dout, each
// (batch, rows, heads, head_dim) with the params' element strides; the decoding kernels read q (or
// its rotated copy) and the caches (entries or pages, rows, heads, head_dim). The kernels are instantiated
// for 16-bit types only.
#pragma once
#include <vector>

#include "emulate/regions.h"
#include "kernels/bwd_params.h"
#include "kernels/decode/decode_params.h"

namespace chiplet_fa {

void add_regions(std::vector<emu::Region>& regions, const FwdParams& p);
void add_regions(std::vector<emu::Region>& regions, const BwdParams& p);
void add_regions(std::vector<emu::Region>& regions, const DecodeParams& p);

}  // namespace chiplet_fa
