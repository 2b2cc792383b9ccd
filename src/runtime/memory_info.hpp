// What cuMemGetInfo and cudaMemGetInfo report under tidepool.
//
// Frameworks size themselves from these calls, so the answer must describe
// the budget, not the board: total is the device limit, used is what the pool
// has handed out, and memory the pool holds but has not handed out counts as
// free. free + used <= total always holds.
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
