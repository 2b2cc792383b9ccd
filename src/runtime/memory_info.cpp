// See memory_info.hpp.
#include "runtime/memory_info.hpp"

#include <algorithm>

namespace tidepool::runtime {

MemoryInfo visible_memory(const Allocator& allocator, MemoryInfo driver) {
  const pool::PoolStats s = allocator.pool().stats(false);
  const std::size_t total = std::min<std::size_t>(driver.total_bytes, allocator.space().device_limit());
  const std::size_t used = std::min<std::size_t>(s.handed_out_bytes, total);
  const std::size_t cached = s.reserved_bytes > s.handed_out_bytes ? s.reserved_bytes - s.handed_out_bytes : 0;
  // What the pool may still take: free on the board plus what it caches,
  // never more than the budget leaves.
  return {std::min<std::size_t>(driver.free_bytes + cached, total - used), total};
}

}  // namespace tidepool::runtime
