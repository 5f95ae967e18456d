#include "emulate/regions.h"

#include <algorithm>
#include <array>

namespace chiplet_fa::emu {

bool locate(const Region& r, const void* addr, int64_t index[4]) {
  const auto* a = static_cast<const unsigned char*>(addr);
  if (a < r.base) return false;
  const int64_t bytes = a - r.base;
  if (bytes % r.elem_bytes != 0) return false;
  int64_t rest = bytes / r.elem_bytes;
  std::array<int, 4> order{0, 1, 2, 3};
  std::sort(order.begin(), order.end(), [&](int x, int y) { return r.stride[x] > r.stride[y]; });
  for (int d : order) {
    index[d] = 0;
    if (r.size[d] <= 1 || r.stride[d] == 0) continue;  // a dimension of one element has no say
    index[d] = std::min(rest / r.stride[d], r.size[d] - 1);
    rest -= index[d] * r.stride[d];
  }
  return rest == 0;
}

}  // namespace chiplet_fa::emu
