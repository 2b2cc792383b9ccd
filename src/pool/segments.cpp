// Segments: see segments.hpp.
#include "pool/segments.hpp"

#include <algorithm>

namespace tidepool::pool {

Segment* Segments::add(space::Reservation* reservation, Block* whole, int arena) {
  auto segment = std::make_unique<Segment>();
  segment->reservation = reservation;
  segment->first = whole;
  segment->arena = arena;
  whole->segment = segment.get();
  const std::uintptr_t begin = reservation->base();
  const std::uintptr_t end = begin + reservation->size();
  if (begin < span_begin_.load(std::memory_order_relaxed)) span_begin_.store(begin, std::memory_order_relaxed);
  if (end > span_end_.load(std::memory_order_relaxed)) span_end_.store(end, std::memory_order_relaxed);
  owned_.push_back(std::move(segment));
  return owned_.back().get();
}

void Segments::remove(const Segment* segment) {
  std::erase_if(owned_, [segment](const auto& owned) { return owned.get() == segment; });
}

bool Segments::contains(std::uintptr_t address) const {
  return std::any_of(owned_.begin(), owned_.end(),
                     [address](const auto& segment) { return segment->reservation->contains(address); });
}

const Segment* Segments::of(const space::Reservation* reservation) const {
  for (const auto& segment : owned_) {
    if (segment->reservation == reservation) return segment.get();
  }
  return nullptr;
}

Block* Segments::block_containing(std::uintptr_t address) const {
  for (const auto& segment : owned_) {
    if (!segment->reservation->contains(address)) continue;
    for (Block* b = segment->first; b != nullptr; b = b->next) {
      if (address >= b->address && address < b->address + b->size) return b;
    }
    return nullptr;
  }
  return nullptr;
}

}  // namespace tidepool::pool
