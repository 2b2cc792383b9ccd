// Queries: lookups of live blocks, what the pool could serve, statistics
// and snapshots. Each takes the pool's lock; none calls the driver.
#include <algorithm>
#include <mutex>

#include "pool/pool.hpp"

namespace tidepool::pool {

bool Pool::owns(std::uintptr_t address) const {
  std::lock_guard<util::SpinLock> guard(lock_);
  return live_.starting_at(address) != nullptr;
}

std::size_t Pool::requested_size(std::uintptr_t address) const {
  std::lock_guard<util::SpinLock> guard(lock_);
  const Block* b = live_.starting_at(address);
  return b != nullptr ? b->requested : 0;
}

bool Pool::in_segments(std::uintptr_t address) const {
  std::lock_guard<util::SpinLock> guard(lock_);
  return segments_.contains(address);
}

bool Pool::find_containing(std::uintptr_t address, std::uintptr_t* base, std::size_t* size,
                           std::uint64_t* buffer_id) const {
  std::lock_guard<util::SpinLock> guard(lock_);
  const Block* b = live_.containing(address);
  // The driver knows an allocation only as large as it was asked for, and
  // a freed one not at all (one other processes still map included).
  if (b == nullptr || address >= b->address + b->requested || b->freed_while_shared) return false;
  *base = b->address;
  *size = b->requested;
  if (buffer_id != nullptr) *buffer_id = b->buffer_id;
  return true;
}

std::size_t Pool::servable_bytes(std::size_t driver_free) const {
  std::lock_guard<util::SpinLock> guard(lock_);
  // Whole mapped pages under free blocks can be re-stitched under any range;
  // pages shared with a live block (small blocks) cannot.
  std::size_t idle_pages = 0;
  for (const Arena& arena : arenas_) {
    arena.index().for_each_by_address([&](const Block* b) {
      const space::Reservation& r = *b->segment->reservation;
      if (r.is_chunk()) return;
      const auto [first, end] = r.whole_pages(b->address, b->size);
      idle_pages += r.mapped_pages(first, end);
    });
  }
  const std::size_t page = space_.page_size();
  const std::size_t held = space_.device_bytes();
  const std::size_t limit = space_.pool_limit();
  const std::size_t budget_left = limit > held ? limit - held : 0;
  const std::size_t cached = space_.spare_bytes() + idle_pages * page;
  if (!space_.uses_vmm()) {
    // Chunks: only the largest free block, or a new chunk within the budget.
    std::size_t largest = 0;
    for (const Arena& arena : arenas_) {
      arena.index().for_each_by_address([&](const Block* b) { largest = std::max(largest, b->size); });
    }
    return std::max(largest, std::min(budget_left, driver_free));
  }
  return util::align_down(cached + std::min(budget_left, driver_free), page);
}

PoolStats Pool::stats(bool with_fragmentation) const {
  std::lock_guard<util::SpinLock> guard(lock_);
  return stats_locked(with_fragmentation);
}

bool Pool::try_stats(std::chrono::steady_clock::time_point deadline, PoolStats* stats, SizeHistogram* classes,
                     OwnerBytes* owners) const {
  if (!util::try_lock_until(lock_, deadline)) return false;
  std::lock_guard<util::SpinLock> guard(lock_, std::adopt_lock);
  *stats = stats_locked(true);
  *classes = size_classes_;
  *owners = owners_;
  owners->settle();
  return true;
}

PoolStats Pool::stats_locked(bool with_fragmentation) const {
  PoolStats s = stats_;
  s.reserved_bytes = space_.device_bytes();
  s.peak_reserved_bytes = space_.peak_device_bytes();
  s.spare_bytes = space_.spare_bytes();
  s.maps = space_.counters().maps;
  s.unmaps = space_.counters().unmaps;
  s.parked_reuses = space_.counters().parked_reuses;
  s.access_grants = space_.counters().access_grants;
  s.page_creates = space_.counters().creates;
  s.page_releases = space_.counters().releases;
  s.host_pages = space_.host_pages();
  s.live_blocks = live_.size();
  s.segments = segments_.count();
  s.free_bytes = s.reserved_bytes > s.handed_out_bytes ? s.reserved_bytes - s.handed_out_bytes : 0;
  s.free_blocks = arenas_[0].index().count() + arenas_[1].index().count();
  if (!with_fragmentation) return s;
  // The largest request servable without new physical memory: a free block's
  // mapped bytes plus whatever spare pages could back the rest of it.
  std::uint64_t largest = 0;
  for (const Arena& arena : arenas_) {
    arena.index().for_each_by_address([&](const Block* b) {
      const std::uint64_t mapped = b->segment->reservation->mapped_bytes(b->address, b->size);
      largest = std::max<std::uint64_t>(largest, std::min<std::uint64_t>(b->size, mapped + s.spare_bytes));
    });
  }
  s.largest_free_block = largest;
  return s;
}

SizeHistogram Pool::size_classes() const {
  std::lock_guard<util::SpinLock> guard(lock_);
  return size_classes_;
}

OwnerBytes Pool::owner_bytes() const {
  OwnerBytes copy;
  {
    std::lock_guard<util::SpinLock> guard(lock_);
    copy = owners_;
  }
  copy.settle();
  return copy;
}

std::vector<BlockView> Pool::snapshot() const {
  std::lock_guard<util::SpinLock> guard(lock_);
  std::vector<BlockView> out;
  segments_.for_each([&](const Segment& segment) {
    const space::Reservation& r = *segment.reservation;
    for (const Block* b = segment.first; b != nullptr; b = b->next) {
      out.push_back(BlockView{b->address, b->size, b->is_free ? 0 : b->requested, r.is_backed(b->address, b->size),
                              segment.arena});
    }
  });
  return out;
}

}  // namespace tidepool::pool
