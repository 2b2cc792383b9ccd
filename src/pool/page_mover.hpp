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
#include "util/status.hpp"

namespace tidepool::pool {

// A live block that may give up its device pages, as the pool sees it.
struct EvictionCandidate {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  space::Reservation* reservation = nullptr;
  std::uint64_t last_use = 0;  // the pool's use clock: allocation, hints, prefetches; larger is more recent
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
};

}  // namespace tidepool::pool
