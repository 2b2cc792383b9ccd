// What cuMemGetInfo and cudaMemGetInfo report under tidepool.
//
// Frameworks size themselves from these calls, so the answer must describe
// the budget, not the board: total is the device limit, and free is what one
// request of that size could get now (cached pages the pool can re-stitch plus
// the budget left, capped by what the driver has free). Free space on pages
// shared with live small blocks is not counted: no large request can use it.
#pragma once

#include <cstddef>

#include "runtime/allocator.hpp"

namespace tidepool::runtime {

struct MemoryInfo {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
};

// `driver` is what the real driver reported for the device.
MemoryInfo visible_memory(const Allocator& allocator, MemoryInfo driver);

}  // namespace tidepool::runtime
