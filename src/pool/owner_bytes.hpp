// OwnerBytes: a pool's memory by owner, for the report's `owners`.
//
// An owner is a small tag the caller gives each allocation (the runtime
// gives the call site that asked for it: runtime/call_sites.hpp); the pool
// keeps it on the block, so the free counts against the same owner. The pool
// owns one and updates it under its lock, like SizeHistogram: fixed arrays,
// no heap. Besides each owner's own peak, it keeps what each owner held when
// the pool's live bytes were at their peak: those add up across owners to
// the pool's peak, where owners' own peaks (reached at different moments) do
// not. That is kept lazily, in O(1) per call: each pool peak starts a new
// epoch, and an owner's first change in an epoch records what it held at
// its start (unchanged since the peak that began it); settle() does the same
// for the owners that have not changed since.
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
  std::uint64_t epoch = 0;               // the pool peak its live_at_peak_bytes is settled for
};

class OwnerBytes {
 public:
  static constexpr std::size_t kOwners = 256;  // tags 0..255; 0 is "not known"

  static constexpr std::uint16_t clamp(std::uint16_t owner) noexcept { return owner < kOwners ? owner : 0; }

  // An allocation of `size` bytes by `owner`; `pool_peak`: the pool's live
  // bytes reach a new peak with it.
  void allocated(std::uint16_t owner, std::size_t size, bool pool_peak) noexcept {
    OwnerCounts& c = settled(owner);
    c.allocations++;
    c.requested_bytes += size;
    c.live_bytes += size;
    if (c.live_bytes > c.peak_live_bytes) c.peak_live_bytes = c.live_bytes;
    if (owner >= used_) used_ = static_cast<std::size_t>(owner) + 1;
    if (pool_peak) {
      ++epoch_;  // every other owner holds now what it held at this peak
      c.live_at_peak_bytes = c.live_bytes;
      c.epoch = epoch_;
    }
  }
  void freed(std::uint16_t owner, std::size_t size) noexcept { settled(owner).live_bytes -= size; }
  void failed(std::uint16_t owner) noexcept {
    counts_[owner].failures++;
    if (owner >= used_) used_ = static_cast<std::size_t>(owner) + 1;
  }
  // Every owner's live_at_peak_bytes as of now (for a copy being reported).
  void settle() noexcept {
    for (std::size_t i = 0; i < used_; ++i) (void)settled(static_cast<std::uint16_t>(i));
  }

  // Tags below this may have counts; none at or above it has.
  [[nodiscard]] std::size_t used() const noexcept { return used_; }
  // Settled only after settle().
  [[nodiscard]] const OwnerCounts& operator[](std::size_t owner) const noexcept { return counts_[owner]; }

 private:
  // `owner`'s counts, its live bytes at the latest pool peak recorded if it
  // has not changed since that peak (so they are still what it held then).
  OwnerCounts& settled(std::uint16_t owner) noexcept {
    OwnerCounts& c = counts_[owner];
    if (c.epoch != epoch_) {
      c.live_at_peak_bytes = c.live_bytes;
      c.epoch = epoch_;
    }
    return c;
  }

  std::array<OwnerCounts, kOwners> counts_{};
  std::size_t used_ = 0;
  std::uint64_t epoch_ = 0;  // pool peaks so far
};

}  // namespace tidepool::pool
