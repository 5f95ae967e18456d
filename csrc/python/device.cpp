#include "python/device.h"

#include <stdexcept>

#include "build_config.h"
#if CHIPLET_FA_GPU
#include "ops/gpu/device_family.h"
#endif

namespace chiplet_fa {

DeviceName parse_device(const std::string& device) {
  const size_t colon = device.find(':');
  const std::string type = device.substr(0, colon), index = colon == std::string::npos ? "" : device.substr(colon + 1);
  const bool type_ok = !type.empty() && type.find_first_not_of("abcdefghijklmnopqrstuvwxyz_") == std::string::npos;
  const bool index_ok = colon == std::string::npos || (!index.empty() && index.size() <= 9 &&
                                                       index.find_first_not_of("0123456789") == std::string::npos);
  if (!type_ok || !index_ok)
    throw std::invalid_argument("device must be 'cpu', 'cuda' or 'cuda:<index>', got '" + device + "'");
  return {type == "cuda", index.empty() ? -1 : std::stoi(index), device};
}

int gpu_ordinal(const DeviceName& device) {
#if CHIPLET_FA_GPU
  return device.index >= 0 ? device.index : current_device();
#else
  return device.index;
#endif
}

}  // namespace chiplet_fa
