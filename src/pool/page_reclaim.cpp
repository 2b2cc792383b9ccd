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
  return !unsynchronized_async_frees_ || synchronize_context();
}

std::size_t Pool::reclaim_idle_pages(std::size_t pages_needed, std::uintptr_t keep_begin, std::uintptr_t keep_end,
                                     bool may_synchronize, std::uintptr_t request_stream, bool learn) {
  // Without a synchronisation, only blocks with nothing pending give pages.
  const bool all_idle = may_synchronize ? synchronize_if_needed() : !unsynchronized_async_frees_;
  // The first page index of `b` that lies wholly inside it, and one past the last.
  auto whole_pages = [](const Block* b, const space::Reservation& r) {
    const std::size_t page = r.page_size();
    const std::size_t first = (util::align_up(b->address - r.base(), page)) / page;
    const std::size_t end = (b->address + b->size - r.base()) / page;
    return std::pair{first, std::max(first, end)};
  };
  // Longest idle first: in a training loop the pages idle since before the
  // current step are those its layout no longer uses, and taking them first
  // lets the pool settle into a layout that needs no remapping.
  victims_.clear();
  for (Arena& arena : arenas_) {
    arena.index.for_each_by_address([&](const Block* b) {
      const space::Reservation& r = *b->segment->reservation;
      if (r.is_chunk()) return;
      const auto [first, end] = whole_pages(b, r);
      if (r.next_mapped(first, end) < end) victims_.push_back(const_cast<Block*>(b));
    });
  }
  std::sort(victims_.begin(), victims_.end(), [](const Block* a, const Block* b) {
    return a->freed_at != b->freed_at ? a->freed_at < b->freed_at : a->address < b->address;
  });
  std::size_t reclaimed = 0;
  for (Block* b : victims_) {
    if (reclaimed >= pages_needed) break;
    if (!all_idle && !settle_by_query(b, request_stream)) continue;
    space::Reservation& r = *b->segment->reservation;
    const auto [first, end] = whole_pages(b, r);
    for (std::size_t p = r.next_mapped(first, end); p < end && reclaimed < pages_needed;
         p = r.next_mapped(p + 1, end)) {
      const std::uintptr_t at = r.page_address(p);
      if (at < keep_end && at + r.page_size() > keep_begin) continue;
      if (!space_.unback(r, p, 1)) continue;
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
      if (!only->is_free || only->next != nullptr || !only->in_index) {
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
  stats_.trims++;
  return before - space_.device_bytes();
}

}  // namespace tidepool::pool
