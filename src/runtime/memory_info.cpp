// See memory_info.hpp.
#include "runtime/memory_info.hpp"

#include <algorithm>

namespace tidepool::runtime {

MemoryInfo visible_memory(const Allocator& allocator, MemoryInfo driver) {
  const std::size_t total = std::min<std::size_t>(driver.total_bytes, allocator.space().device_limit());
  // Free is what one request of that size would get: frameworks size their
  // workspaces from it. Space on pages shared with live small blocks is not
  // free for such a request, so it is not counted.
  return {std::min<std::size_t>(allocator.pool().servable_bytes(driver.free_bytes), total), total};
}

}  // namespace tidepool::runtime
