#include "emulate/global_memory.h"

#include <cstdint>
#include <sstream>

#include "emulate/workgroup.h"

namespace chiplet_fa::emu {

void global_read(const void* address, size_t bytes) {
  Workgroup& wg = Workgroup::current();
  const Launch& launch = wg.launch();
  if (reinterpret_cast<uintptr_t>(address) % bytes != 0) {
    std::ostringstream msg;
    msg << bytes << "-byte global read at " << address << " is not " << bytes << "-byte aligned";
    wg.fail(msg.str());
  }
  if (launch.regions.empty()) return;
  for (size_t i = 0; i < launch.regions.size(); ++i) {
    const Region& r = launch.regions[i];
    int64_t index[4];
    if (!locate(r, address, index)) continue;
    if ((index[3] + int64_t(bytes) / r.elem_bytes) > r.size[3]) {
      std::ostringstream msg;
      msg << bytes << "-byte global read at " << address << " runs past the end of row " << index[1]
          << " of " << r.name << " (" << r.size[3] << " columns)";
      wg.fail(msg.str());
    }
    if (launch.trace_slot >= 0 && !wg.trace().record(wg.block_id(), int(i), index))
      wg.fail("shape too large to trace (batch and heads below 65536, rows below 2^28)");
    return;
  }
  std::ostringstream msg;
  msg << bytes << "-byte global read at " << address << " lies in none of the kernel's inputs (";
  for (size_t i = 0; i < launch.regions.size(); ++i) msg << (i ? ", " : "") << launch.regions[i].name;
  msg << ")";
  wg.fail(msg.str());
}

}  // namespace chiplet_fa::emu
