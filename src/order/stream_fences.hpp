// StreamFences: for one context, how far each stream's work is known to
// have finished, counted in epochs of the owner's stream-ordered frees.
//
// The owner (a pool) calls freed() at every stream-ordered free and at every
// device barrier it puts frees behind, and stamps what it freed with the
// epoch returned. Work queued on stream key k before epoch e is known
// finished once finished(k, e): an event recorded on k after e reported
// CUDA_SUCCESS, or a context synchronisation since e succeeded. A stream's
// finished epoch only grows, and a failed call is never read as "finished".
// A key is kAfterBarrier's for frees behind a device barrier: its epochs are
// answered by the BarrierFences record behind each barrier, else by a record
// on the legacy stream, which follows the barrier.
//
// Not thread-safe: the owner's lock guards it; events come from and return
// to the owner's EventCache, in the owner's context.
#pragma once

#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <unordered_map>

#include "driver/driver.hpp"
#include "order/barrier_fences.hpp"
#include "order/event_cache.hpp"
#include "order/stream_keys.hpp"
#include "order/stream_registry.hpp"
#include "util/util.hpp"

namespace tidepool::order {

class StreamFences {
 public:
  StreamFences(const driver::Api& api, CUcontext context, StreamRegistry& registry, EventCache& events,
               BarrierFences& barriers)
      : api_(api), context_(context), registry_(registry), events_(events), barriers_(barriers) {}
  ~StreamFences() { clear(); }
  StreamFences(const StreamFences&) = delete;
  StreamFences& operator=(const StreamFences&) = delete;

  // The hot path's check: `key` is the stream met last, and ours to fence.
  [[nodiscard]] bool cached(std::uintptr_t key) const noexcept {
    return last_state_ != nullptr && key == last_key_ && !last_state_->other_context;
  }
  // Whether the owner may use stream key `key`: a handle met for the first
  // time is checked with the driver (invalid_handle when it names no live
  // stream; other_device for a stream of another context, not ours to
  // fence). A stream created behind the hooks' back joins the registry.
  util::Status check(std::uintptr_t key);

  // A stream-ordered free, or a device barrier: the epoch to stamp it with.
  std::uint64_t freed() noexcept {
    unsynchronized_ = true;
    return ++epoch_;
  }
  // Whether some free since the last context synchronisation may still be
  // in use by the device.
  [[nodiscard]] bool unsynchronized() const noexcept { return unsynchronized_; }
  // The newest epoch handed out by freed() (0: none).
  [[nodiscard]] std::uint64_t epoch() const noexcept { return epoch_; }
  // The owner synchronised the context itself, outside its lock, after
  // reading epoch() as `epoch`: every free up to it is finished.
  void synchronized_through(std::uint64_t epoch) noexcept {
    synchronized_epoch_ = std::max(synchronized_epoch_, epoch);
    unsynchronized_ = epoch_ > synchronized_epoch_;
  }

  // Whether the work on `key` before `epoch` is known finished (no driver call).
  [[nodiscard]] bool finished(std::uintptr_t key, std::uint64_t epoch) const;
  // finished(), and failing that, asks the driver: queries the stream's
  // record in flight, or records one and queries it. Waits only when `key`
  // is `may_wait_for` (the requester's own earlier work), or, for
  // kAfterBarrier with `wait_for_barrier`, for the work before the barrier
  // of `epoch` (not the work queued since).
  bool query(std::uintptr_t key, std::uint64_t epoch, std::uintptr_t may_wait_for, bool wait_for_barrier);
  // Orders new work after the work on `key` before `epoch`: on `stream`
  // without a host wait (`ordered`, a cuStreamWaitEvent), else by waiting
  // on the host; `*had_to_wait` is set when the work was still running. A
  // call that fails leaves it unordered, and the status says why; the caller
  // may then synchronize().
  util::Status order_after(std::uintptr_t key, std::uint64_t epoch, std::uintptr_t stream, bool ordered,
                           bool* had_to_wait);
  // A page stays mapped behind the barrier of `epoch` until its work is
  // done, which will be asked later: a record answers it then without a
  // wait for all queued since (BarrierFences::answer_later). The owner's
  // context is current.
  void parked_behind_barrier(std::uint64_t epoch) {
    if (!finished(kAfterBarrier, epoch)) barriers_.answer_later(epoch);
  }
  // A context synchronisation: every free so far is finished. False when
  // it could not be made (`capture_in_progress`, or the call failed).
  bool synchronize(bool capture_in_progress);

  // Whether the owner has met stream key `key` (check() or a fence).
  [[nodiscard]] bool met(std::uintptr_t key) const { return streams_.find(key) != streams_.end(); }
  // `key`'s stream is destroyed: its state and event go.
  void forget(std::uintptr_t key);
  // Destroys every stream's event (the owner's teardown).
  void clear();

 private:
  struct StreamState {
    CUevent event = nullptr;  // recorded after frees up to recorded_epoch
    std::uint64_t recorded_epoch = 0;
    std::uint64_t finished_epoch = 0;  // frees up to this epoch are known finished
    bool other_context = false;        // a stream of another device: not ours to fence
  };

  const driver::Api& api_;
  CUcontext context_;
  StreamRegistry& registry_;
  EventCache& events_;
  BarrierFences& barriers_;
  std::unordered_map<std::uintptr_t, StreamState> streams_;  // by stream key
  std::uintptr_t last_key_ = kNoPendingWork;                 // a one-entry cache in front of streams_
  StreamState* last_state_ = nullptr;
  std::uint64_t epoch_ = 0;
  std::uint64_t synchronized_epoch_ = 0;  // frees up to this epoch are known finished everywhere
  bool unsynchronized_ = false;
};

}  // namespace tidepool::order
