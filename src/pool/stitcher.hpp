// Stitcher: backs a range with idle pages taken from under free blocks
// elsewhere, so that what the pool holds tracks what is live rather than the
// history of its layout, and learns how many pages the layout needs.
//
// Invariant: a page is taken only from under free blocks, never within the
// range being backed, and only once no queued work can touch it (its block
// has no pending stream, its stream is known past the free, or the caller
// synchronised the context: `all_idle`) or all work queued from then on runs
// after the work that may (the block was freed before a device barrier,
// `barrier_epoch`, or on the requesting stream, which then makes one). Such
// a page stays mapped at its old place, parked with that work as its
// space::PendingUse, until the work is done: a mapping is never unmapped
// under queued work. Pages go longest idle first, and a segment's free tail
// gives those farthest from where the policy carves it first. Pages taken
// to back another range are marked, so that needing them again teaches the
// pool to hold more (pages_to_hold_, bounded by the slack over the peak live
// bytes) instead of moving the same pages every training step. Not
// thread-safe; the pool serialises calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "order/order.hpp"
#include "pool/arena.hpp"
#include "pool/block.hpp"
#include "pool/segments.hpp"
#include "space/space.hpp"

namespace tidepool::pool {

// A device barrier made on request (the pool's): all work any stream queues
// afterwards runs after all work queued before. Returns its epoch
// (order::StreamFences), or 0 when none can be made.
class BarrierMaker {
 public:
  virtual std::uint64_t make() = 0;

 protected:
  ~BarrierMaker() = default;
};

class Stitcher {
 public:
  // Everything passed is the pool's and outlives the stitcher.
  Stitcher(space::AddressSpace& space, const Segments& segments, Arena (&arenas)[2], order::StreamFences& fences,
           std::size_t hold_slack_percent)
      : space_(space), segments_(segments), arenas_(arenas), fences_(fences), hold_slack_percent_(hold_slack_percent) {}

  // Pages the pool may create for [begin, begin + length) rather than take
  // from elsewhere: what needing stitched-away pages again taught it, within
  // the slack over `peak_live_bytes`. Updates what it holds on to.
  std::size_t growth_room(const space::Reservation& r, std::uintptr_t begin, std::size_t length,
                          std::uint64_t peak_live_bytes);
  // What growth_room would answer, without learning from the asking.
  std::size_t growth_room_if_asked(const space::Reservation& r, std::uintptr_t begin, std::size_t length,
                                   std::uint64_t peak_live_bytes) const;
  // Whether the slack over `peak_live_bytes` is the one page it never goes
  // below (a small working set, or a small `hold_slack`), rather than the
  // percentage.
  bool slack_is_one_page(std::uint64_t peak_live_bytes) const noexcept;
  // For each unmapped page of [begin, begin + length) whose physical page is
  // still parked: frees that page where it is current now, if it is idle
  // there, so that backing the range makes it current here at no driver
  // cost. Returns how many it freed.
  // `barrier_epoch`, `barriers`: as for reclaim. Without `may_wait` the
  // host never waits, not even for `request_stream`.
  std::size_t free_parked_pages(const space::Reservation& r, std::uintptr_t begin, std::size_t length,
                                std::uintptr_t request_stream, std::uint64_t barrier_epoch,
                                BarrierMaker* barriers = nullptr, bool may_wait = true);
  // Unmaps up to `pages_needed` idle pages outside [keep_begin, keep_end).
  // `all_idle`: the caller proved no freed block has work pending (a
  // synchronisation); else a block gives pages once its stream is past it,
  // or behind a barrier (below), waiting only on `request_stream` (a stream
  // key) where no barrier can be made, or, with
  // `wait_for_barrier`, for the work before the barrier it came back behind.
  // `learn`: mark the pages, so that needing them again teaches the pool to
  // hold more; a trim does not. `barrier_epoch`: the epoch of the newest
  // device barrier (order::StreamFences); blocks freed before it give pages
  // without waiting (see the invariant); 0: none does. `barriers`: where a
  // block freed on `request_stream` after that barrier still has work
  // queued, a new barrier (at most one per call) instead of a host wait for
  // the stream; null: the host waits.
  std::size_t reclaim(std::size_t pages_needed, std::uintptr_t keep_begin, std::uintptr_t keep_end, bool all_idle,
                      std::uintptr_t request_stream, bool learn, bool wait_for_barrier, std::uint64_t barrier_epoch,
                      BarrierMaker* barriers = nullptr);

 private:
  // The hold, with what this range needing back its pages teaches.
  std::size_t learned_hold(const space::Reservation& r, std::uintptr_t begin, std::size_t length) const;
  // Pages the pool may still create under `hold`, within the slack.
  std::size_t room_under(std::size_t hold, std::uint64_t peak_live_bytes) const noexcept;
  // The most pages the slack's percentage allows over the peak.
  std::size_t percent_ceiling(std::uint64_t peak_live_bytes) const noexcept;
  // The most pages the slack's one page allows over the peak.
  std::size_t one_page_ceiling(std::uint64_t peak_live_bytes) const noexcept;

  space::AddressSpace& space_;
  const Segments& segments_;
  Arena (&arenas_)[2];
  order::StreamFences& fences_;
  std::size_t hold_slack_percent_;
  // Physical pages the layout has shown it needs: stitching stops taking
  // pages from elsewhere until the pool holds this many.
  std::size_t pages_to_hold_ = 0;
  // A free block reclaim may take pages from, and from which end first.
  struct Victim {
    Block* block;
    bool high_end_first;
  };
  std::vector<Victim> victims_;     // reclaim's scratch
  std::vector<std::size_t> pages_;  // reclaim's scratch: a free tail's mapped pages
};

}  // namespace tidepool::pool
