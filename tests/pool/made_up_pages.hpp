// Test support for the pool's tests: pages at made-up addresses, for
// reservations that are bookkeeping only (nothing is mapped there).
#pragma once

#include <cstddef>
#include <cstdint>

#include "util/units.hpp"

namespace tidepool::pool::made_up {

// A page as the pool's reservations have it (2 MiB, the usual VMM granularity).
inline constexpr std::size_t kPage = 2 * util::MiB;
// Where made-up reservations start: 1 TiB, above anything the process maps.
inline constexpr std::uintptr_t kBase = std::uintptr_t{1} << 40;

}  // namespace tidepool::pool::made_up
