// Stitcher: see stitcher.hpp for the invariant.
#include "pool/stitcher.hpp"

#include <algorithm>

namespace tidepool::pool {

namespace {

// How many pages the hold grows by per page a range needs back (growth_room).
constexpr std::size_t kReturningOvershoot = 2;

// Whether free block `b` may give pages now, and what may still use them
// (`*pending`). A block settled (asking the driver, waiting as
// settle_by_query may) gives them with nothing pending. One with work pending
// gives them only if it was freed before a device barrier (put back behind
// one, or freed in stream order before the newest: free epochs start at 1, a
// barrier epoch of 0 admits none), since all work queued after the barrier
// runs after its work; the old mappings then stay until the work before that
// barrier is done. That fence covers every stream, destroyed ones too, and
// outlives the block's own stream. A block freed on the requesting stream
// after the newest barrier makes one (`*barriers`) rather than have the host
// wait for its stream; where none can be made, `*barriers` is cleared for
// the rest of the caller's walk and the host waits as before, if `may_wait`.
bool may_give_pages(Block& b, order::StreamFences& fences, std::uintptr_t request_stream, bool may_wait,
                    bool wait_for_barrier, std::uint64_t* barrier_epoch, BarrierMaker** barriers,
                    space::PendingUse* pending) {
  *pending = {};
  const std::uintptr_t may_wait_for = may_wait ? request_stream : kNoPendingWork;
  const bool own = *barriers != nullptr && request_stream != kNoPendingWork && b.stream == request_stream;
  if (settle_by_query(b, fences, own ? kNoPendingWork : may_wait_for, wait_for_barrier)) return true;
  if (b.free_epoch > *barrier_epoch) {
    if (!own) return false;
    const std::uint64_t made = (*barriers)->make();
    if (made == 0) {
      *barriers = nullptr;
      return settle_by_query(b, fences, may_wait_for, wait_for_barrier);
    }
    *barrier_epoch = made;
  }
  *pending = {.key = kAfterBarrier, .epoch = b.stream == kAfterBarrier ? b.free_epoch : *barrier_epoch, .any = true};
  return true;
}

// Page `p` of `r`, just given with `pending` work behind a barrier, stays
// parked (still mapped there) until that work is done: the newest such
// barrier, so that one record answers for all of a walk's pages
// (order::StreamFences::parked_behind_barrier). A page unmapped at once
// needs no answer.
void note_parked(const space::Reservation& r, std::size_t p, const space::PendingUse& pending, std::uint64_t* newest) {
  if (!pending.any || pending.key != kAfterBarrier || r.page(p).physical == nullptr) return;
  *newest = std::max(*newest, pending.epoch);
}

}  // namespace

std::size_t Stitcher::growth_room(const space::Reservation& r, std::uintptr_t begin, std::size_t length,
                                  std::uint64_t peak_live_bytes) {
  pages_to_hold_ = learned_hold(r, begin, length);
  return room_under(pages_to_hold_, peak_live_bytes);
}

std::size_t Stitcher::growth_room_if_asked(const space::Reservation& r, std::uintptr_t begin, std::size_t length,
                                           std::uint64_t peak_live_bytes) const {
  return room_under(learned_hold(r, begin, length), peak_live_bytes);
}

std::size_t Stitcher::learned_hold(const space::Reservation& r, std::uintptr_t begin, std::size_t length) const {
  // Pages of this range that stitching took away earlier are needed again:
  // the layout uses more pages than the pool holds, and moving the same pages
  // back and forth would repeat every training step. The shortfall shows
  // one range at a time, and while the device lags, a step's timing decides
  // how much of it one step shows: the hold grows by twice what this range
  // needs back, so that it is learned in the steps after the first rather
  // than a little more in every step (decisions.md).
  const std::size_t returning = r.reclaimed_pages(begin, length);
  return returning > 0 ? std::max(pages_to_hold_, space_.device_pages() + kReturningOvershoot * returning)
                       : pages_to_hold_;
}

std::size_t Stitcher::room_under(std::size_t hold, std::uint64_t peak_live_bytes) const noexcept {
  // Never past the slack over the peak live bytes: beyond it, utilization
  // comes first and pages keep moving. The slack is at least one page, so a
  // small working set spanning both arenas (a 512 B and an 8 MiB block in
  // turn) does not move a page between them on every call.
  const std::size_t ceiling =
      slack_is_one_page(peak_live_bytes) ? one_page_ceiling(peak_live_bytes) : percent_ceiling(peak_live_bytes);
  const std::size_t held = space_.device_pages();
  return std::min(hold, ceiling) > held ? std::min(hold, ceiling) - held : 0;
}

std::size_t Stitcher::percent_ceiling(std::uint64_t peak_live_bytes) const noexcept {
  return (peak_live_bytes + peak_live_bytes / 100 * hold_slack_percent_) / space_.page_size();
}

std::size_t Stitcher::one_page_ceiling(std::uint64_t peak_live_bytes) const noexcept {
  return util::align_up(peak_live_bytes, space_.page_size()) / space_.page_size() + 1;
}

bool Stitcher::slack_is_one_page(std::uint64_t peak_live_bytes) const noexcept {
  return one_page_ceiling(peak_live_bytes) > percent_ceiling(peak_live_bytes);
}

std::size_t Stitcher::free_parked_pages(const space::Reservation& r, std::uintptr_t begin, std::size_t length,
                                        std::uintptr_t request_stream, std::uint64_t barrier_epoch,
                                        BarrierMaker* barriers, bool may_wait) {
  if (r.is_chunk() || length == 0) return 0;
  const std::size_t page_size = r.page_size();
  const std::uintptr_t end = begin + length;
  std::size_t freed = 0;
  std::uint64_t parked_behind = 0;  // the newest barrier a page was parked behind
  for (std::size_t p = r.page_of(begin); p <= r.page_of(end - 1); ++p) {
    const space::PageEntry& entry = r.page(p);
    if (entry.residency != space::Residency::unmapped || entry.physical == nullptr) continue;
    const space::PageLocation now = entry.physical->current;
    if (now.reservation == nullptr) continue;  // spare already
    const std::uintptr_t at = now.reservation->page_address(now.page);
    if (at < end && at + page_size > begin) continue;  // needed by this range too
    // Idle there: wholly under one free block whose pending work is done.
    const Segment* segment = segments_.of(now.reservation);
    Block* holder = segment != nullptr ? arenas_[segment->arena].index().containing(at) : nullptr;
    if (holder == nullptr || holder->address > at || holder->address + holder->size < at + page_size) continue;
    space::PendingUse pending;
    if (fences_.unsynchronized() &&
        !may_give_pages(*holder, fences_, request_stream, may_wait, false, &barrier_epoch, &barriers, &pending)) {
      continue;
    }
    if (space_.unback(*now.reservation, now.page, 1, pending)) {
      now.reservation->page(now.page).reclaimed = true;
      ++freed;
      note_parked(*now.reservation, now.page, pending, &parked_behind);
    }
  }
  if (parked_behind != 0) fences_.parked_behind_barrier(parked_behind);
  return freed;
}

std::size_t Stitcher::reclaim(std::size_t pages_needed, std::uintptr_t keep_begin, std::uintptr_t keep_end,
                              bool all_idle, std::uintptr_t request_stream, bool learn, bool wait_for_barrier,
                              std::uint64_t barrier_epoch, BarrierMaker* barriers) {
  // Longest idle first: in a training loop the pages idle since before the
  // current step are those its layout no longer uses, and taking them first
  // lets the pool settle into a layout that needs no remapping. A segment's
  // free tail is cut from the end its policy carves first, request after
  // request, so its pages at the other end are needed last and go first
  // (decisions.md, the victim orders).
  victims_.clear();
  for (Arena& arena : arenas_) {
    arena.index().for_each_by_address([&](const Block* b) {
      const space::Reservation& r = *b->segment->reservation;
      if (r.is_chunk()) return;
      const auto [first, end] = r.whole_pages(b->address, b->size);
      if (r.next_mapped(first, end) >= end) return;
      const bool tail = b->next == nullptr;
      victims_.push_back({const_cast<Block*>(b), tail && arena.end_carved_first(*b) == CarveEnd::low});
    });
  }
  std::sort(victims_.begin(), victims_.end(), [](const Victim& a, const Victim& b) {
    const Block& x = *a.block;
    const Block& y = *b.block;
    return x.freed_at != y.freed_at ? x.freed_at < y.freed_at : x.address < y.address;
  });
  std::size_t reclaimed = 0;
  std::uint64_t parked_behind = 0;  // the newest barrier a page was parked behind
  for (const Victim& victim : victims_) {
    if (reclaimed >= pages_needed) break;
    Block* b = victim.block;
    space::PendingUse pending;
    space::Reservation& r = *b->segment->reservation;
    const auto [first, end] = r.whole_pages(b->address, b->size);
    // Only a block with a page to give is asked where asking may make a
    // barrier.
    const auto kept = [&](std::size_t p) {
      const std::uintptr_t at = r.page_address(p);
      return at < keep_end && at + r.page_size() > keep_begin;
    };
    std::size_t takeable = r.next_mapped(first, end);
    while (barriers != nullptr && takeable < end && kept(takeable)) takeable = r.next_mapped(takeable + 1, end);
    if (takeable >= end) continue;
    if (!all_idle &&
        !may_give_pages(*b, fences_, request_stream, true, wait_for_barrier, &barrier_epoch, &barriers, &pending)) {
      continue;
    }
    const auto take = [&](std::size_t p) {
      if (kept(p)) return;
      // A host page under a free block goes back to the host cache, but
      // frees no device page.
      const bool on_host = r.page(p).residency == space::Residency::host;
      if (!space_.unback(r, p, 1, pending) || on_host) return;
      r.page(p).reclaimed = learn;
      ++reclaimed;
      note_parked(r, p, pending, &parked_behind);
    };
    if (!victim.high_end_first) {
      for (std::size_t p = takeable; p < end && reclaimed < pages_needed; p = r.next_mapped(p + 1, end)) take(p);
      continue;
    }
    pages_.clear();
    for (std::size_t p = takeable; p < end; p = r.next_mapped(p + 1, end)) pages_.push_back(p);
    for (auto p = pages_.rbegin(); p != pages_.rend() && reclaimed < pages_needed; ++p) take(*p);
  }
  if (parked_behind != 0) fences_.parked_behind_barrier(parked_behind);
  return reclaimed;
}

}  // namespace tidepool::pool
