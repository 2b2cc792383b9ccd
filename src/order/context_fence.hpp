// ContextFence: a point in a context's stream order, as events. It is
// recorded behind the work queued so far on every stream of the context and
// is passed once all of that work has finished:
//   - one event on the legacy stream, which waits for every blocking stream
//     (created ones, per-thread default streams, destroyed ones still
//     running), so it covers them all;
//   - one event on each live non-blocking stream the StreamRegistry lists;
//   - the last event of each destroyed non-blocking stream whose work may
//     still run (the registry recorded it at the destruction);
//   - one event on each stream of tidepool's own the caller names (a page
//     mover's copy streams), which the registry does not list.
// A record reorders nothing and waits for nothing: work that will not
// finish on its own (a kernel waiting for a flag) leaves the fence
// unpassed, never a later stream's work held up.
//
// Where events cannot prove the point (a gap), only a context
// synchronisation made after the record does: the registry may not see
// every stream, a destroyed stream's record failed, a stream was capturing
// (a record would have joined the capture), or no event could be taken or
// recorded. record() names the first gap it met, so that a caller may wait
// for a capture to end and record again rather than synchronise.
//
// Used by the cudaFree fences (free_fences.hpp) and by a block shared with
// another process, which waits for the work queued before its owner.
// Recorded once. Not thread-safe: record() and release() take the owner's
// lock (they use the registry and the event cache); a fence no other
// thread sees may be queried without it.
#pragma once

#include <cuda.h>

#include <memory>
#include <span>
#include <vector>

#include "driver/driver.hpp"
#include "order/event_cache.hpp"
#include "order/stream_registry.hpp"

namespace tidepool::order {

class ContextFence {
 public:
  // Why events alone cannot prove a fence.
  enum class Gap {
    none,
    unseen,     // the registry is not complete, or a destroyed stream's record failed
    capturing,  // a stream of the context was capturing
    failed,     // no event to take, or a record failed
  };

  ContextFence() = default;
  ContextFence(ContextFence&&) noexcept = default;
  ContextFence& operator=(ContextFence&&) noexcept = default;
  ContextFence(const ContextFence&) = delete;
  ContextFence& operator=(const ContextFence&) = delete;

  // Records the fence behind the work queued so far on the streams of
  // `context` (current) and on `own_streams`, taking events from `events`;
  // `streams` is scratch space. With `known_gap`, the caller knows of work
  // events cannot cover: no event is recorded, the destroyed streams are
  // still listed (a synchronisation settles them) and the fence reads
  // Gap::unseen.
  Gap record(const driver::Api& api, EventCache& events, StreamRegistry& registry, CUcontext context,
             std::vector<CUstream>* streams, bool known_gap = false, std::span<const CUstream> own_streams = {});

  // Only a context synchronisation proves it.
  [[nodiscard]] bool needs_sync() const noexcept { return gap_ != Gap::none; }
  [[nodiscard]] Gap gap() const noexcept { return gap_; }

  // CUDA_SUCCESS once every event and destroyed stream is finished,
  // CUDA_ERROR_NOT_READY while one is not, or the error a query answered.
  // Never passed unrecorded or while needs_sync() (CUDA_ERROR_NOT_READY).
  CUresult query(const driver::Api& api);
  // Whether the fence is passed; with `wait`, the host waits for each event
  // in turn. A query that errs, or a destroyed stream that cannot be waited
  // for, leaves the fence needing a synchronisation.
  bool finished(const driver::Api& api, bool wait);
  // After a context synchronisation that began after the record: every
  // destroyed stream it lists is finished.
  void synchronized() noexcept;

  // Gives the events back to `events`, or destroys them when the fence has
  // a gap or a query erred: a capture may have begun between the check and
  // the record, so such an event may sit in it.
  void release(const driver::Api& api, EventCache& events);
  // Destroys the events, for an owner torn down with the fence unpassed.
  void destroy(const driver::Api& api);

 private:
  std::vector<CUevent> events_;
  std::vector<std::shared_ptr<RetiredStream>> retired_;
  Gap gap_ = Gap::none;
  bool recorded_ = false;
};

}  // namespace tidepool::order
