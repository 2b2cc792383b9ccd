// The C API's allocation with the caller named: the pluggable allocator's
// entry point passes PyTorch's return address, not its own, so memory it
// serves is owned by the framework in the report and the trace.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tidepool/tidepool.h"

namespace tidepool::capi {

// tidepool_malloc_async, as asked by the code at `caller` (a return address).
tidepool_status malloc_async_from(void** ptr, std::size_t size, int device, void* stream,
                                  std::uintptr_t caller) noexcept;

}  // namespace tidepool::capi
