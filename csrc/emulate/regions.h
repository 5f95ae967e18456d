// Global memory as the emulator sees it: named 4-D regions (batch, row, head, column) of the
// tensors a launch may read through the copy path. locate() turns an address back into the
// element it falls on; the copy hook (access_trace.h) uses it to refuse reads outside every region and
// to record which rows of K and V each workgroup read.
#pragma once
#include <cstdint>

namespace chiplet_fa::emu {

struct Region {
  const char* name;  // "q", "k", "v", "dout"
  const unsigned char* base;
  int64_t elem_bytes;
  int64_t size[4];    // batch, rows, heads, columns
  int64_t stride[4];  // in elements
};

// The (batch, row, head, column) of the element at addr, if addr is one of r's elements.
// Strides may be in any order and interleave with other regions' (q, k and v as views of one
// packed tensor): the index is peeled off from the largest stride down and must be in range.
bool locate(const Region& r, const void* addr, int64_t index[4]);

}  // namespace chiplet_fa::emu
