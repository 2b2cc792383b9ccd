// Page reclaim: which idle pages stitching unmaps to back another range,
// and trimming.
//
// Invariant: a page is unmapped only under free blocks, never within the
// range being backed, and only once no queued work can touch it: its block
// has no pending stream, its stream is known past the free, or the context
// was synchronised. Pages go longest idle first. Pages taken to back another
// range are marked, so that needing them again teaches the pool to hold more
// (pages_to_hold_, bounded by the slack over the peak live bytes) instead of
// moving the same pages every training step.
#include <algorithm>
#include <limits>
#include <mutex>

#include "pool/pool.hpp"

namespace tidepool::pool {

bool Pool::synchronize_if_needed() {
  // Blocks freed in stream order may still be in use by queued work; pages
  // beneath them can be unmapped only once that work is done.
  return !fences_.unsynchronized() || synchronize_context();
}

std::size_t Pool::learned_growth_room(const space::Reservation& r, std::uintptr_t begin, std::size_t length) {
  // Pages of this range that stitching took away earlier are needed again:
  // the layout uses more pages than the pool holds, and moving the same pages
  // back and forth would repeat every training step.
  if (const std::size_t returning = r.reclaimed_pages(begin, length); returning > 0) {
    pages_to_hold_ = std::max(pages_to_hold_, space_.device_pages() + returning);
  }
  // Never past the slack over the peak live bytes: beyond it, utilization
  // comes first and pages keep moving. The slack is at least one page, so a
  // small working set spanning both arenas (a 512 B and an 8 MiB block in
  // turn) does not move a page between them on every call.
  const std::size_t page = space_.page_size();
  const std::uint64_t peak = stats_.peak_live_bytes;
  const std::size_t ceiling =
      std::max((peak + peak / 100 * options_.hold_slack_percent) / page, util::align_up(peak, page) / page + 1);
  const std::size_t hold = std::min(pages_to_hold_, ceiling);
  const std::size_t held = space_.device_pages();
  return hold > held ? hold - held : 0;
}

const Segment* Pool::segment_of(const space::Reservation* r) const {
  for (const auto& segment : segments_) {
    if (segment->reservation == r) return segment.get();
  }
  return nullptr;
}

std::size_t Pool::free_parked_pages(const space::Reservation& r, std::uintptr_t begin, std::size_t length,
                                    std::uintptr_t request_stream) {
  if (r.is_chunk() || length == 0) return 0;
  const std::size_t page_size = r.page_size();
  const std::uintptr_t end = begin + length;
  std::size_t freed = 0;
  for (std::size_t p = r.page_of(begin); p <= r.page_of(end - 1); ++p) {
    const space::PageEntry& entry = r.page(p);
    if (entry.residency != space::Residency::unmapped || entry.physical == nullptr) continue;
    const space::PageLocation now = entry.physical->current;
    if (now.reservation == nullptr) continue;  // spare already
    const std::uintptr_t at = now.reservation->page_address(now.page);
    if (at < end && at + page_size > begin) continue;  // needed by this range too
    // Idle there: wholly under one free block whose pending work is done.
    const Segment* segment = segment_of(now.reservation);
    Block* holder = segment != nullptr ? arenas_[segment->arena].index.containing(at) : nullptr;
    if (holder == nullptr || holder->address > at || holder->address + holder->size < at + page_size) continue;
    if (fences_.unsynchronized() && !settle_by_query(holder, request_stream)) continue;
    if (space_.unback(*now.reservation, now.page, 1)) {
      now.reservation->page(now.page).reclaimed = true;
      ++freed;
    }
  }
  return freed;
}

std::size_t Pool::reclaim_idle_pages(std::size_t pages_needed, std::uintptr_t keep_begin, std::uintptr_t keep_end,
                                     bool may_synchronize, std::uintptr_t request_stream, bool learn,
                                     bool wait_for_barrier) {
  // Without a synchronisation, only blocks with nothing pending give pages.
  const bool all_idle = may_synchronize ? synchronize_if_needed() : !fences_.unsynchronized();
  // Longest idle first: in a training loop the pages idle since before the
  // current step are those its layout no longer uses, and taking them first
  // lets the pool settle into a layout that needs no remapping.
  victims_.clear();
  for (Arena& arena : arenas_) {
    arena.index.for_each_by_address([&](const Block* b) {
      const space::Reservation& r = *b->segment->reservation;
      if (r.is_chunk()) return;
      const auto [first, end] = r.whole_pages(b->address, b->size);
      if (r.next_mapped(first, end) < end) victims_.push_back(const_cast<Block*>(b));
    });
  }
  std::sort(victims_.begin(), victims_.end(), [](const Block* a, const Block* b) {
    return a->freed_at != b->freed_at ? a->freed_at < b->freed_at : a->address < b->address;
  });
  std::size_t reclaimed = 0;
  for (Block* b : victims_) {
    if (reclaimed >= pages_needed) break;
    if (!all_idle && !settle_by_query(b, request_stream, wait_for_barrier)) continue;
    space::Reservation& r = *b->segment->reservation;
    const auto [first, end] = r.whole_pages(b->address, b->size);
    for (std::size_t p = r.next_mapped(first, end); p < end && reclaimed < pages_needed;
         p = r.next_mapped(p + 1, end)) {
      const std::uintptr_t at = r.page_address(p);
      if (at < keep_end && at + r.page_size() > keep_begin) continue;
      // A host page under a free block goes back to the host cache, but
      // frees no device page.
      const bool on_host = r.page(p).residency == space::Residency::host;
      if (!space_.unback(r, p, 1) || on_host) continue;
      r.page(p).reclaimed = learn;
      ++reclaimed;
    }
  }
  return reclaimed;
}

std::size_t Pool::trim_chunks() {
  std::size_t released = 0;
  for (int arena_id = 0; arena_id < 2; ++arena_id) {
    Arena& arena = arenas_[arena_id];
    for (auto it = arena.segments.begin(); it != arena.segments.end();) {
      Segment* segment = *it;
      Block* only = segment->first;
      // A chunk whose free block may still be in use by queued work (stream
      // order, or behind a device barrier) is kept until that work is done.
      if (!only->is_free || only->next != nullptr || !only->in_index ||
          (fences_.unsynchronized() && !settle_by_query(only, kNoPendingWork))) {
        ++it;
        continue;
      }
      arena.index.erase(only);
      blocks_.recycle(only);
      released += segment->reservation->size();
      (void)space_.unreserve(segment->reservation);
      it = arena.segments.erase(it);
      std::erase_if(segments_, [segment](const auto& owned) { return owned.get() == segment; });
    }
  }
  return released;
}

std::size_t Pool::trim() {
  std::lock_guard<util::SpinLock> guard(lock_);
  driver::ScopedContext scope(api_, context_);
  promote_deferred(DeferredFrees::Wait::everything);
  const std::size_t before = space_.device_bytes();
  if (space_.uses_vmm()) {
    reclaim_idle_pages(std::numeric_limits<std::size_t>::max(), 0, 0, true, kNoPendingWork, /*learn=*/false);
  } else if (synchronize_if_needed()) {
    trim_chunks();
  }
  space_.release_spares(std::numeric_limits<std::size_t>::max());
  if (mover_ != nullptr) mover_->collect_released_host_pages();
  stats_.trims++;
  return before - space_.device_bytes();
}

}  // namespace tidepool::pool
