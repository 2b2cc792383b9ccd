// SizeHistogram: allocations by requested size, in power-of-two classes, for
// the report's `size_classes`. The pool owns one and updates it under its
// lock on every allocation, free and failed allocation.
//
// Class 0 holds requests up to 512 B, class c up to 512 << c bytes, through
// 1 GiB; the last class holds everything larger. Recording is a bit_width,
// a clamp and a few counter updates on a fixed array: no heap, no branch
// beyond the peak's, so it costs the hot path next to nothing.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

namespace tidepool::pool {

struct SizeClassCounts {
  std::uint64_t allocations = 0;
  std::uint64_t frees = 0;
  std::uint64_t live = 0;             // allocations - frees: blocks of this class live now
  std::uint64_t peak_live = 0;        // the most blocks of this class live at once
  std::uint64_t requested_bytes = 0;  // sum of the sizes requested by its allocations
  std::uint64_t ooms = 0;             // allocations of this class that failed
};

class SizeHistogram {
 public:
  static constexpr unsigned kFirstShift = 9;  // class 0: up to 2^9 = 512 B
  static constexpr unsigned kLastShift = 30;  // the last bounded class: up to 2^30 = 1 GiB
  static constexpr std::size_t kBounded = kLastShift - kFirstShift + 1;
  static constexpr std::size_t kClasses = kBounded + 1;  // and one for larger requests

  // The class of a request of `size` bytes (size >= 1): bit_width(size - 1)
  // is the exponent of the smallest power of two at least `size`.
  static constexpr std::size_t class_of(std::size_t size) noexcept {
    const unsigned exponent = static_cast<unsigned>(std::bit_width(size - (size != 0 ? 1 : 0)));
    if (exponent <= kFirstShift) return 0;
    const std::size_t c = exponent - kFirstShift;
    return c < kBounded ? c : kBounded;
  }
  // The smallest and largest request of class `c`; max is 0 for the last,
  // unbounded class.
  static constexpr std::uint64_t min_bytes(std::size_t c) noexcept {
    return c == 0 ? 1 : (std::uint64_t{1} << (kFirstShift + c - 1)) + 1;
  }
  static constexpr std::uint64_t max_bytes(std::size_t c) noexcept {
    return c < kBounded ? std::uint64_t{1} << (kFirstShift + c) : 0;
  }

  void allocated(std::size_t size) noexcept {
    SizeClassCounts& k = counts_[class_of(size)];
    k.allocations++;
    k.requested_bytes += size;
    if (++k.live > k.peak_live) k.peak_live = k.live;
  }
  void freed(std::size_t size) noexcept {
    SizeClassCounts& k = counts_[class_of(size)];
    k.frees++;
    k.live--;
  }
  void failed(std::size_t size) noexcept { counts_[class_of(size)].ooms++; }

  [[nodiscard]] const SizeClassCounts& operator[](std::size_t c) const noexcept { return counts_[c]; }

 private:
  std::array<SizeClassCounts, kClasses> counts_{};
};

static_assert(SizeHistogram::class_of(1) == 0 && SizeHistogram::class_of(512) == 0);
static_assert(SizeHistogram::class_of(513) == 1 && SizeHistogram::class_of(1024) == 1);
static_assert(SizeHistogram::class_of(std::size_t{1} << 30) == SizeHistogram::kBounded - 1);
static_assert(SizeHistogram::class_of((std::size_t{1} << 30) + 1) == SizeHistogram::kBounded);
static_assert(SizeHistogram::min_bytes(1) == 513 && SizeHistogram::max_bytes(1) == 1024);

}  // namespace tidepool::pool
