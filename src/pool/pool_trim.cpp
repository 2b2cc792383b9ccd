// Trimming: what the pool gives back to the driver on request (trim) or when
// chunks run short without VMM (trim_chunks). Pages go from under free blocks
// as stitching takes them (stitcher.hpp); a caller that may synchronise wants
// pages it can release, so it takes none whose queued work may still run.
#include <limits>
#include <mutex>

#include "pool/pool.hpp"

namespace tidepool::pool {

bool Pool::synchronize_if_needed() {
  // Blocks freed in stream order may still be in use by queued work; pages
  // beneath them can be unmapped only once that work is done.
  return !fences_.unsynchronized() || synchronize_context();
}

std::size_t Pool::reclaim_idle_pages(std::size_t pages_needed, std::uintptr_t keep_begin, std::uintptr_t keep_end,
                                     bool may_synchronize, std::uintptr_t request_stream, bool learn,
                                     bool wait_for_barrier, BarrierMaker* barriers) {
  // Without a synchronisation, only blocks with nothing pending give pages,
  // and those freed before a device barrier.
  const bool all_idle = may_synchronize ? synchronize_if_needed() : !fences_.unsynchronized();
  if (may_synchronize) {
    return stitcher_.reclaim(pages_needed, keep_begin, keep_end, all_idle, request_stream, learn, wait_for_barrier, 0);
  }
  return stitcher_.reclaim(pages_needed, keep_begin, keep_end, all_idle, request_stream, learn, wait_for_barrier,
                           pages_with_work_pending_from(), barriers);
}

std::size_t Pool::trim_chunks() {
  std::size_t released = 0;
  for (Arena& arena : arenas_) {
    // A copy: a released chunk leaves the arena's list.
    const std::vector<Segment*> chunks = arena.segments();
    for (Segment* segment : chunks) {
      Block* only = segment->first;
      // A chunk whose free block may still be in use by queued work (stream
      // order, or behind a device barrier) is kept until that work is done.
      if (!only->is_free || only->next != nullptr || !only->in_index ||
          (fences_.unsynchronized() && !settle_by_query(*only, fences_, kNoPendingWork))) {
        continue;
      }
      space::Reservation* reservation = segment->reservation;
      released += reservation->size();
      arena.remove(segment);
      segments_.remove(segment);
      (void)space_.unreserve(reservation);
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
