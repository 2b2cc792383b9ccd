// OwnerBytes: a pool's memory by owner, for the report's `owners`.
//
// An owner is a small tag the caller gives each allocation (the runtime
// gives the call site that asked for it: runtime/call_sites.hpp); the pool
// keeps it on the block, so the free counts against the same owner. The pool
// owns one and updates it under its lock, like SizeHistogram: fixed arrays,
// no heap. Besides each owner's own peak, it keeps what each owner held when
// the pool's live bytes were at their peak: those add up across owners to
// the pool's peak, where owners' own peaks (reached at different moments) do
// not. Keeping it costs a pass over the tags in use each time the pool's
// peak rises (while a program grows, rarely after).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace tidepool::pool {

struct OwnerCounts {
  std::uint64_t allocations = 0;
  std::uint64_t failures = 0;            // requests refused with out-of-memory
  std::uint64_t requested_bytes = 0;     // sum of the sizes its allocations asked for
  std::uint64_t live_bytes = 0;          // requested bytes live now
  std::uint64_t peak_live_bytes = 0;     // the most it held at once
  std::uint64_t live_at_peak_bytes = 0;  // what it held when the pool's live bytes peaked
};

class OwnerBytes {
 public:
  static constexpr std::size_t kOwners = 256;  // tags 0..255; 0 is "not known"

  static constexpr std::uint16_t clamp(std::uint16_t owner) noexcept { return owner < kOwners ? owner : 0; }

  // An allocation of `size` bytes by `owner`; `pool_peak`: the pool's live
  // bytes reach a new peak with it.
  void allocated(std::uint16_t owner, std::size_t size, bool pool_peak) noexcept {
    OwnerCounts& c = counts_[owner];
    c.allocations++;
    c.requested_bytes += size;
    c.live_bytes += size;
    if (c.live_bytes > c.peak_live_bytes) c.peak_live_bytes = c.live_bytes;
    if (owner >= used_) used_ = static_cast<std::size_t>(owner) + 1;
    if (pool_peak) {
      for (std::size_t i = 0; i < used_; ++i) counts_[i].live_at_peak_bytes = counts_[i].live_bytes;
    }
  }
  void freed(std::uint16_t owner, std::size_t size) noexcept { counts_[owner].live_bytes -= size; }
  void failed(std::uint16_t owner) noexcept {
    counts_[owner].failures++;
    if (owner >= used_) used_ = static_cast<std::size_t>(owner) + 1;
  }

  // Tags below this may have counts; none at or above it has.
  [[nodiscard]] std::size_t used() const noexcept { return used_; }
  [[nodiscard]] const OwnerCounts& operator[](std::size_t owner) const noexcept { return counts_[owner]; }

 private:
  std::array<OwnerCounts, kOwners> counts_{};
  std::size_t used_ = 0;
};

}  // namespace tidepool::pool
