// LiveSet: see live_set.hpp.
#include "pool/live_set.hpp"

#include <atomic>

namespace tidepool::pool {

namespace {

// Buffer ids: the top bit keeps them apart from the driver's own (small
// counters), the next 15 bits name the pool, the rest count its allocations.
std::atomic<std::uint64_t> next_pool_serial{0};

// Live, and held on the device by nothing but (perhaps) a submission's pin.
bool movable_but_for_pins(const Block* b) {
  return !b->is_free && b->requested != 0 && !b->keep_resident && !b->peer_held && b->graph_holds == 0 &&
         b->import_holds == 0;
}

}  // namespace

LiveSet::LiveSet(const Segments& segments) : segments_(segments) {
  const std::uint64_t serial = next_pool_serial.fetch_add(1) & 0x7fff;
  id_base_ = (std::uint64_t{1} << 63) | (serial << 48);
}

Block* LiveSet::containing(std::uintptr_t address) const {
  // A program passes the same interior pointers (views, offsets into a
  // workspace) launch after launch: the last block found for each 2 MiB
  // stretch answers again if it is still that live block, and the walk
  // along a segment's blocks (thousands, in a training run) is paid once.
  Block*& hint = hints_[(address >> 21) % hints_.size()];
  if (hint != nullptr && !hint->is_free && hint->requested != 0 && address >= hint->address &&
      address < hint->address + hint->size && map_.find(hint->address) == hint) {
    return hint;
  }
  Block* block = segments_.block_containing(address);
  if (block == nullptr || block->is_free || block->requested == 0) return nullptr;
  hint = block;
  return block;
}

void LiveSet::eviction_candidates(std::uint64_t spared_from, std::vector<EvictionCandidate>* out) const {
  out->clear();
  segments_.for_each([&](const Segment& segment) {
    if (segment.reservation->is_chunk()) return;
    for (const Block* b = segment.first; b != nullptr; b = b->next) {
      if (!movable_but_for_pins(b) || b->pins > 0) continue;
      if (spared_from != 0 && b->last_use >= spared_from) continue;
      const auto [first, end] = segment.reservation->whole_pages(b->address, b->size);
      if (first == end) continue;  // shares every page it touches: never evicted
      out->push_back({b->address, b->size, segment.reservation, b->last_use, b->buffer_id, b->read_on_host});
    }
  });
}

std::size_t LiveSet::pinned_device_pages() const {
  std::size_t pages = 0;
  segments_.for_each([&](const Segment& segment) {
    const space::Reservation& r = *segment.reservation;
    if (r.is_chunk()) return;
    for (const Block* b = segment.first; b != nullptr; b = b->next) {
      if (!movable_but_for_pins(b) || b->pins == 0) continue;
      const auto [first, end] = r.whole_pages(b->address, b->size);
      for (std::size_t p = first; p < end; ++p) pages += r.page(p).residency == space::Residency::device ? 1 : 0;
    }
  });
  return pages;
}

}  // namespace tidepool::pool
