// BarrierFences: when the work before each recent device barrier finished.
//
// Blocks put back behind a device barrier (kAfterBarrier) may be handed out
// at once, but their pages may be unmapped only once the work queued before
// the barrier has run. One event recorded on the legacy stream right behind
// each barrier (the barrier made that stream wait for every other) answers
// that for the barrier's blocks alone. Without it the only answer is a
// record made when the question is asked, at the tail of the queue, which
// finishes only when the device has drained everything queued since.
//
// A pool keeps one behind every barrier stitching makes (a request that
// needs a parked page's old place back asks about that barrier's work, often
// a step later), and behind the barriers that promote frees only with
// eviction on (see promote_deferred_behind_barrier). Keeping a few barriers'
// events lets a caller wait for the work before one barrier and no more: the
// host waits, and the device runs on with whatever was queued after that
// barrier (prefetch:learn's bring-backs use it to take the pages of blocks
// freed a few launches ago).
//
// Not thread-safe: the owning pool's lock guards it; events come from and
// return to the pool's EventCache, in the pool's context.
#pragma once

#include <cuda.h>

#include <array>
#include <cstddef>
#include <cstdint>

#include "driver/driver.hpp"
#include "order/event_cache.hpp"

namespace tidepool::order {

class BarrierFences {
 public:
  static constexpr std::size_t kKept = 8;

  BarrierFences(const driver::Api& api, EventCache& events) : api_(api), events_(events) {}
  BarrierFences(const BarrierFences&) = delete;
  BarrierFences& operator=(const BarrierFences&) = delete;

  // Right after the device barrier of `epoch`: a record on the legacy stream.
  // The oldest barrier's record is dropped when all kKept are in flight. A
  // failed record leaves nothing: that barrier's blocks settle as before.
  void recorded_barrier(std::uint64_t epoch);
  // Whether the work before the barrier of `epoch` is done will be asked
  // later (a page stays parked behind it): where no record kept answers for
  // it, one is made now on the legacy stream. Every barrier's work comes
  // before what that stream queues afterwards (the barrier made it wait for
  // every other stream, or all work was on it), so a later record answers
  // too, only later than one right behind the barrier would. Without it,
  // the question is answered by a record made when asked, at the tail of
  // the queue, and the host waits for all that was queued since.
  void answer_later(std::uint64_t epoch);
  // The newest epoch whose barrier's work is known finished (0: none), from
  // queries of the records still in flight, oldest first. The host waits
  // until `wait_through` is finished (0: waits for none): for the records up
  // to its own, or up to the next one kept if its own was dropped (more
  // than kKept barriers in flight), never for a record past that, and not
  // at all when no record kept answers for it or a wait fails.
  std::uint64_t finished_through(std::uint64_t wait_through = 0);
  // Gives every event back (before the pool's events are destroyed).
  void clear();

 private:
  struct Record {
    std::uint64_t epoch = 0;
    CUevent event = nullptr;
  };
  void pop_oldest(bool failed);

  const driver::Api& api_;
  EventCache& events_;
  std::array<Record, kKept> ring_{};
  std::size_t first_ = 0;
  std::size_t count_ = 0;
  std::uint64_t finished_ = 0;
};

}  // namespace tidepool::order
