// PageMover: what the pool asks of a layer that can move the pages of live
// blocks to the host and back. The residency layer implements it; the pool
// knows only this interface, so it stays below residency in the layer order.
//
// Every call is made with the pool's lock held: the mover may use the
// AddressSpace (which that lock serialises) and must never call back into
// the pool. The pool keeps the use bookkeeping (a use clock per live block,
// keep-resident marks) and hands the mover its candidates, so the mover's
// view of what is live is always the pool's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "space/space.hpp"
#include "util/util.hpp"

namespace tidepool::pool {

// A live block that may give up its device pages, as the pool sees it.
struct EvictionCandidate {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  space::Reservation* reservation = nullptr;
  std::uint64_t last_use = 0;   // the pool's use clock: allocation, hints, prefetches; larger is more recent
  std::uint64_t buffer_id = 0;  // unique per allocation
};

// A block a kernel launch named in its parameters.
struct LaunchedBlock {
  std::uintptr_t address = 0;
  std::uint64_t buffer_id = 0;
  std::uint64_t used_at = 0;  // the pool's use clock when the launch scan marked it
};

// The pool's live blocks, as a mover asks about them from inside a call the
// pool made (under its lock).
class LiveBlocks {
 public:
  virtual ~LiveBlocks() = default;
  // The live block at `address` (its start), or false.
  virtual bool find(std::uintptr_t address, EvictionCandidate* out) const = 0;
  // Every live block that may give up device pages (as evict() gets them).
  virtual void candidates(std::vector<EvictionCandidate>* out) const = 0;
  // Unmaps up to `pages` idle pages of free blocks outside [keep_begin,
  // keep_end); returns how many. The device is never waited for, except
  // with `wait_for_freed_work`: then the host may wait for the work queued
  // before the device barrier a freed block came back behind (which may be
  // all work queued until its batch of frees was promoted), never for work
  // queued after that barrier.
  virtual std::size_t reclaim_free_pages(std::size_t pages, std::uintptr_t keep_begin, std::uintptr_t keep_end,
                                         bool wait_for_freed_work) = 0;
};

class PageMover {
 public:
  virtual ~PageMover() = default;
  // Moves pages of `candidates` (live blocks, none marked keep-resident) to
  // the host until at least `pages` device pages are spare, never a page of
  // [keep_begin, keep_end). Returns how many device pages it made spare
  // (fewer when the host cache or the candidates ran out, or a driver call
  // failed; nothing is lost either way).
  virtual std::size_t evict(std::vector<EvictionCandidate>& candidates, std::size_t pages, std::uintptr_t keep_begin,
                            std::uintptr_t keep_end) = 0;
  // Brings the host pages under [address, address + length) of `reservation`
  // back to the device, ordered before any work queued after this call.
  // The caller has made room for them where it could; pages without room
  // stay on the host.
  virtual util::Status bring_back(space::Reservation& reservation, std::uintptr_t address, std::size_t length,
                                  std::uintptr_t stream) = 0;
  // Host pages the space unmapped (a trim, stitching a free range) go back
  // to the cache.
  virtual void collect_released_host_pages() = 0;

  // Learned prefetch (a mover that keeps a schedule; the defaults ignore it).
  // A scanned launch of `kernel` named `blocks`; `all_blocks` false: it
  // named more than these (the scan keeps a bounded list), so no block may
  // be moved without a gate before the launch is queued.
  virtual void launched(std::uintptr_t /*kernel*/, const LaunchedBlock* /*blocks*/, std::size_t /*count*/,
                        bool /*all_blocks*/, LiveBlocks& /*live*/) {}
  // A launch on `stream` is about to use the block: order it after any copy
  // still bringing the block's pages back.
  virtual void before_use(std::uint64_t /*buffer_id*/, std::uintptr_t /*stream*/) {}
  // The block is being freed: nothing of it is moved or predicted any more.
  virtual void forget(std::uint64_t /*buffer_id*/) {}
};

}  // namespace tidepool::pool
