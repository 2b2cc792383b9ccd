// Segments: the VA reservations a pool carves its blocks from, in the order
// they were made, and the span of addresses they cover.
//
// A segment belongs to one arena (small or large requests); its blocks tile
// it from `first`. The span is readable without the pool's lock (launch
// scans pre-check pointers with it) and only grows: a released chunk leaves
// it wide, so a stale span costs a locked lookup, never a wrong answer.
// Not thread-safe otherwise; the pool serialises calls.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "pool/block.hpp"
#include "space/space.hpp"

namespace tidepool::pool {

struct Segment {
  space::Reservation* reservation = nullptr;
  Block* first = nullptr;  // the block at the segment's base address
  int arena = 0;
};

class Segments {
 public:
  // A new segment over `reservation`, tiled by the one free block `whole`.
  Segment* add(space::Reservation* reservation, Block* whole, int arena);
  // Forgets `segment` (its reservation is the caller's to release).
  void remove(const Segment* segment);

  [[nodiscard]] std::size_t count() const noexcept { return owned_.size(); }
  // Whether `address` lies inside any segment.
  [[nodiscard]] bool contains(std::uintptr_t address) const;
  // The segment over `reservation`, or null.
  [[nodiscard]] const Segment* of(const space::Reservation* reservation) const;
  // The block, free or live, whose range holds `address` (a walk of its
  // segment's blocks), or null.
  [[nodiscard]] Block* block_containing(std::uintptr_t address) const;

  template <typename F>
  void for_each(F&& f) const {
    for (const auto& segment : owned_) f(*segment);
  }

  // Without the lock: whether `address` may lie in a segment (a pre-check).
  [[nodiscard]] bool may_contain(std::uintptr_t address) const noexcept {
    return address >= span_begin_.load(std::memory_order_relaxed) &&
           address < span_end_.load(std::memory_order_relaxed);
  }
  // [begin, end) of may_contain as of now.
  [[nodiscard]] std::pair<std::uintptr_t, std::uintptr_t> span() const noexcept {
    return {span_begin_.load(std::memory_order_relaxed), span_end_.load(std::memory_order_relaxed)};
  }

 private:
  std::vector<std::unique_ptr<Segment>> owned_;
  std::atomic<std::uintptr_t> span_begin_{UINTPTR_MAX};
  std::atomic<std::uintptr_t> span_end_{0};
};

}  // namespace tidepool::pool
