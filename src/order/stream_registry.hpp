// StreamRegistry: the streams of the process that are alive, and fences on
// the ones destroyed while their work may still run. It is what makes a
// cudaFree-semantics fence complete (see deferred_frees.hpp for the rule).
//
// Fed by the fronts: the preload's cuStreamCreate*/cuStreamDestroy hooks (every
// route into the driver: exports, dlsym, cuGetProcAddress, and so cudart's
// stream calls too) call created() after the driver made a stream and
// destroying() before it is destroyed. destroying() records an event on the
// stream first, so the work queued on it stays fenced after its handle dies.
//
// `complete`: every stream creation of the process passes through created().
// The preload sets it once it knows its hooks are what the process calls.
// Without it the registry may miss a non-blocking stream, and the fences
// built from it fall back to a context synchronisation (see DeferredFrees).
//
// `legacy_only`: all work the process has queued is on the legacy stream of
// one context. It holds until a stream is created, a submission names
// another stream (a per-thread default stream: the preload's launch, copy,
// set, batch and graph-launch hooks call using_stream() before the driver is
// called), or a second context appears (several_contexts()), and never
// returns.
// While it holds in a complete registry, the legacy stream's own order is a
// device barrier, and device_barrier() queues nothing (BarrierKind::in_order).
// A non-blocking stream created afterwards starts behind the legacy stream's
// work so far (created()), as it starts behind a queued barrier's event.
//
// Locks: `lock_` (a mutex) guards the maps. `creation_lock_` orders stream
// creation against device barriers and is taken before `lock_`; a
// submission's catch-up (catching_up()) and destroying() take it too, and a
// stream's first submission after a barrier may wait for it while another
// thread's barrier, gate or stream creation holds it. Both are taken after
// a pool's lock, never before one: destroying() releases them before any
// pool is told.
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "driver/driver.hpp"
#include "order/stream_followers.hpp"

namespace tidepool::order {

// An event recorded on a stream just before it was destroyed. Shared by the
// fences that include it; the event is destroyed with the last of them.
class RetiredStream {
 public:
  // `recorded`: the event was recorded on the stream. When it was not (a
  // driver call failed) only a context synchronisation proves the work done.
  RetiredStream(const driver::Api& api, CUcontext context, CUevent event, bool recorded) noexcept
      : api_(api), context_(context), event_(event), recorded_(recorded) {}
  ~RetiredStream();
  RetiredStream(const RetiredStream&) = delete;
  RetiredStream& operator=(const RetiredStream&) = delete;
  [[nodiscard]] CUevent event() const noexcept { return event_; }
  [[nodiscard]] CUcontext context() const noexcept { return context_; }
  // Whether the event was recorded behind the stream's work.
  [[nodiscard]] bool recorded() const noexcept { return recorded_; }
  // Whether the work queued before the destruction is known to be finished
  // (an error reads as "not known").
  bool finished();
  // After a context synchronisation that began after the destruction.
  void mark_finished() noexcept { finished_.store(true, std::memory_order_release); }

 private:
  const driver::Api& api_;
  CUcontext context_;
  CUevent event_;
  bool recorded_;
  std::atomic<bool> finished_{false};
};

class StreamRegistry {
 public:
  explicit StreamRegistry(const driver::Api& api) : api_(api) {}
  StreamRegistry(const StreamRegistry&) = delete;
  StreamRegistry& operator=(const StreamRegistry&) = delete;

  // A stream the driver just created (its context and flags are asked of
  // the driver). Null and the special handles are ignored. `through_hooks`:
  // created through the preload's hooks, so that every submission on it is
  // seen from the first (StreamFollowers tracks only those); false for a
  // stream met only later, whose earlier work nothing saw.
  void created(CUstream stream, bool through_hooks = true);
  // A stream about to be destroyed: an event is recorded on it now (when it
  // is known and not capturing) and kept until that work has finished.
  // False when the stream was not registered: nothing fences its work.
  bool destroying(CUstream stream);
  // The driver refused to destroy it after all: it is alive again.
  void destroy_failed(CUstream stream);

  [[nodiscard]] bool complete() const noexcept { return complete_.load(std::memory_order_acquire); }
  void set_complete(bool complete) noexcept { complete_.store(complete, std::memory_order_release); }

  // Work is about to be queued on `stream`: any stream but the legacy one
  // ends legacy_only() for good. Called before the work is queued, so that a
  // block freed after it is never put back by the legacy stream's order.
  // While submissions are followed, the stream's slot is returned when it
  // is tracked (StreamFollowers): it goes to catching_up() right before the
  // driver call, and to submitted() once the call has returned.
  StreamFollowers::Slot* using_stream(CUstream stream) noexcept {
    if (stream == nullptr || stream == CU_STREAM_LEGACY) return nullptr;
    if (legacy_only_.load(std::memory_order_relaxed)) legacy_only_.store(false, std::memory_order_release);
    if (!follows_submissions_.load(std::memory_order_relaxed)) return nullptr;
    return followers_.find(stream);
  }
  // A tracked stream that barriers left to catch up waits for the newest
  // now. Right before the driver call, after anything the submission itself
  // queued first (a bring-back's gate, a stitching barrier).
  void catching_up(CUstream stream, StreamFollowers::Slot* slot) noexcept {
    if (slot != nullptr &&
        slot->followed.load(std::memory_order_acquire) < slot->generation->load(std::memory_order_acquire)) {
      catch_up(stream, slot);
    }
  }
  // The submission using_stream() announced was queued (or refused): the
  // next barrier joins its stream. Marked after the driver call, never
  // before, so that a barrier clearing the mark meanwhile cannot lose it.
  static void submitted(StreamFollowers::Slot* slot) noexcept {
    if (slot != nullptr) slot->unjoined.store(true, std::memory_order_release);
  }
  // A submission on a stream no slot follows (the legacy stream, a blocking
  // or per-thread default stream, which the legacy stream's order takes in,
  // or an untracked one) was queued: the next barrier records the legacy
  // stream's tail afresh. Marked after the driver call, as submitted() is;
  // read first, so that threads launching on the legacy stream write the
  // mark once per barrier, not once per launch.
  void submitted_unfollowed() noexcept {
    if (!legacy_work_.load(std::memory_order_relaxed)) legacy_work_.store(true, std::memory_order_release);
  }
  // The preload's hooks see every submission (launch, copy, set, batch,
  // graph launch): barriers may leave idle tracked streams to catch up at
  // their next one. Off until called, and never off again: marks left
  // unset while off would read as idle streams. Only a complete registry
  // makes barriers.
  void follow_submissions() noexcept { follows_submissions_.store(true, std::memory_order_release); }
  [[nodiscard]] bool legacy_only() const noexcept { return legacy_only_.load(std::memory_order_acquire); }
  // A kernel of `context` (current) is about to be launched with
  // programmatic stream serialization: it may begin before the kernel ahead
  // of it on its stream has finished, so that stream's order is no barrier.
  // legacy_only ends, and where a barrier was made in order, a record on the
  // legacy stream goes between the two kernels first.
  void overlapping_launch(CUcontext context);
  // A second device's pool, peer access, or a second context made current
  // lets work of another context (on its own legacy stream) reach a pool's
  // memory, in no order with the first context's legacy stream.
  // legacy_only ends, and the host waits once for the work each barrier
  // made in order stood for, even where legacy_only had ended before (a
  // per-thread or blocking stream follows only its own context's legacy
  // stream). A wait of the host where native CUDA makes none, once per
  // process; work on that legacy stream waiting for the host would hang it.
  // That legacy_only, read true under a pool's lock, puts the freed block's
  // work before any record or wait made here rests on the driver's own
  // locking of a stream's queue as much as on the atomic's ordering.
  void several_contexts();
  // Whether several_contexts() was ever called: until then all work that
  // can reach a pool's memory is queued in its own context.
  [[nodiscard]] bool one_context() const noexcept { return !several_contexts_seen_.load(std::memory_order_acquire); }
  // The program made `context` current (cuCtxSetCurrent, cuCtxPushCurrent),
  // or a pool was made in it: the first such context, or the first a
  // barrier was made in, is the one legacy_only speaks of; any other calls
  // several_contexts(), whose first call waits for each context's newest
  // queued barrier (blocks put back behind it may now go to another
  // context's work).
  void made_current(CUcontext context);
  // A context whose work may reach a pool's memory (a pool's own, one the
  // program made current), for wait_for_contexts_but. The first
  // kMaxContexts are kept.
  void context_seen(CUcontext context);
  static constexpr std::size_t kMaxContexts = 32;
  // The host waits for the work queued so far in every context seen but
  // `except`: what a cudaFree-style free must wait for once several
  // contexts may reach the pool's memory, since neither a device barrier
  // nor a fence orders another context's work (native cudaFree waits for
  // every device). A context with a capture in progress is not
  // synchronised, which would invalidate the capture, nor one that cannot
  // be made current (destroyed: cuCtxDestroy is not hooked): false then, as
  // when a synchronisation fails, and the free goes on without that wait.
  bool wait_for_contexts_but(CUcontext except);

  // What a cudaFree fence of `context` must cover beyond the legacy stream:
  // the live non-blocking streams, and the destroyed streams whose work may
  // still run. Finished retirements are dropped on the way.
  void fence_targets(CUcontext context, std::vector<CUstream>* non_blocking,
                     std::vector<std::shared_ptr<RetiredStream>>* retired);

  // A device barrier for `context` (the context must be current): each live
  // non-blocking stream records an event that the legacy stream waits for,
  // the legacy stream waits for the events of destroyed streams still
  // running, records the context's barrier event, and each non-blocking
  // stream waits for that. All work any stream of the context queues
  // afterwards then runs after all work queued before, with no host wait.
  // While submissions are followed, a tracked stream with nothing queued
  // since a barrier joined it is not joined, and a barrier (not a gate:
  // moves of live pages wait for no hand-out) makes no tracked stream wait
  // now: it waits at its next submission (catching_up()), before any of its
  // later work is queued. Where such a barrier would join nothing, make no
  // stream wait, and nothing was queued on the legacy stream since the
  // newest barrier event was recorded (submitted_unfollowed()), no retired
  // stream's work is still running, and only one context was seen, that
  // event already marks the legacy stream's tail: the barrier queues
  // nothing and leaves the generation as it is (BarrierKind::standing).
  // Blocking streams (per-thread default streams too) are ordered by the
  // legacy stream itself; streams created later wait for the barrier event
  // at creation (created()). BarrierKind::failed when the barrier cannot be
  // made whole: an incomplete registry, a capture, a record without an
  // event, more than kMaxBarrierStreams streams to join or make wait, or a
  // failed call. Then nothing may be assumed. While
  // legacy_only() holds, the barrier is the legacy stream's own order and
  // nothing is queued (BarrierKind::in_order); the context's next
  // non-blocking stream then starts behind a record made at its creation.
  enum class BarrierKind {
    failed,    // not made whole: nothing may be assumed
    queued,    // records and waits were queued
    standing,  // nothing new to cover: the newest barrier's event stands for this one, nothing queued
    in_order,  // all work so far is on the legacy stream: its order is the barrier, nothing was queued
  };
  BarrierKind device_barrier(CUcontext context);
  // device_barrier() with `on_legacy` called once the legacy stream waits for
  // every other stream and before it records the barrier event: what it
  // queues on the legacy stream (or on a stream made to wait for it) runs
  // after all work queued before the gate, and all work queued after the
  // gate, on any stream of the context, runs after it. The residency layer
  // queues its copies and a wait on a host-written flag here, so that no
  // work touches a page while the host remaps it. False from `on_legacy`
  // stops the gate (false returned). `on_legacy` may name, through its
  // argument, a stream of its own whose queued work the gate ends with: the
  // barrier event is then recorded there, and the legacy stream waits for it
  // like every other stream. A gate whose work waits for the host (a flag)
  // puts that wait there, so that the host queues nothing on the legacy
  // stream behind it: another thread filling the legacy stream's queue
  // behind a wait only this host can end would block this host for good.
  bool device_gate(CUcontext context, const std::function<bool(CUstream* ends_on)>& on_legacy);
  static constexpr std::size_t kMaxBarrierStreams = 32;
  // Whether a stream of `context` (the current one) may be capturing: the
  // legacy stream (or a blocking stream, which it reports), or a live
  // non-blocking one. While one does, nothing may synchronise the context
  // or touch a capturing stream: either would invalidate the capture.
  [[nodiscard]] bool capture_in_progress(CUcontext context);

  // Whether `stream` is registered as alive (tests, diagnostics).
  [[nodiscard]] bool alive(CUstream stream) const;

 private:
  struct Entry {
    CUcontext context = nullptr;
    bool non_blocking = false;
  };
  // Per context: the barrier's legacy-stream event, and the events the
  // non-blocking streams record for the legacy stream to wait on (reused:
  // a wait is on the record made before it, not on later ones).
  struct Barrier {
    CUevent after = nullptr;
    // Bumped by each barrier (not gate) queued whole while submissions are
    // followed: tracked streams that followed an older one wait for `after`
    // at their next submission.
    std::atomic<std::uint64_t> generation{0};
    std::vector<CUevent> joins;
    // A barrier of this context was made by the legacy stream's order, and
    // no record has stood for it since: the next non-blocking stream created
    // here starts behind one made at its creation.
    bool in_order = false;
    // A barrier of this context was made in order at some time: a second
    // context must wait for its work (several_contexts()).
    bool made_in_order = false;
    // `after` was recorded by the newest barrier or gate, which was made
    // whole: with legacy_work_ unset since, it marks the legacy stream's tail.
    bool after_current = false;
  };
  // Whether the newest barrier's event of `context` still marks its legacy
  // stream's tail, so that a barrier joining nothing and making no stream
  // wait may stand on it (one context only: the mark is the process's).
  bool legacy_tail_recorded(CUcontext context, const Barrier& barrier) const noexcept;
  CUevent barrier_event(CUevent* slot);
  // A stream just created, or one catching up, could not be made to wait for `after` (null: for
  // the legacy stream's work so far): the host waits, or else the registry
  // is no longer complete.
  void host_waits_for_the_barrier(CUcontext context, CUevent after);
  void several_contexts_locked();  // several_contexts() under creation_lock_
  // Whether `context` is the first context seen (made so when none was).
  bool first_context_is(CUcontext context);
  // Records the legacy stream's work so far as `barrier`'s event, standing
  // for the barriers made there in order; else the host waits for that work
  // (false). Under creation_lock_.
  bool record_for_in_order_barriers(CUcontext context, Barrier* barrier);
  // device_barrier() past legacy_only, and device_gate() (`on_legacy` set).
  BarrierKind join_and_hold(CUcontext context, const std::function<bool(CUstream* ends_on)>& on_legacy);
  // A tracked stream about to take work waits for its context's newest
  // barrier (its event; else the host waits for it).
  void catch_up(CUstream stream, StreamFollowers::Slot* slot) noexcept;
  const driver::Api& api_;
  std::atomic<bool> complete_{false};
  std::atomic<bool> legacy_only_{true};
  std::atomic<bool> follows_submissions_{false};
  // Work was queued on a stream no slot follows since a barrier or gate
  // last recorded the legacy stream's tail (submitted_unfollowed()).
  // Cleared before such a barrier or gate queues anything, so that work
  // queued after its legacy stream's part marks it again.
  std::atomic<bool> legacy_work_{true};
  std::atomic<bool> several_contexts_seen_{false};  // several_contexts() was called
  // The one context whose legacy stream legacy_only speaks of (null: none
  // seen yet). Set once.
  std::atomic<CUcontext> first_context_{nullptr};
  // Some barrier was made in order and no second context has been met since
  // (several_contexts() clears it, once).
  std::atomic<bool> in_order_outstanding_{false};
  // Held across a device barrier and across created(), so that a stream is
  // either covered by a barrier or made to wait for it. Taken before lock_.
  std::mutex creation_lock_;
  // Guarded by creation_lock_, which orders barriers, in order or queued,
  // against created().
  std::unordered_map<CUcontext, Barrier> barriers_;
  // Streams tracked for barriers; slots claimed and given up under creation_lock_.
  StreamFollowers followers_;
  // device_gate()'s lists, kept for their capacity. Under creation_lock_.
  std::vector<CUstream> gate_streams_;
  std::vector<StreamFollowers::Slot*> gate_slots_;
  std::vector<bool> gate_joins_;
  std::vector<std::shared_ptr<RetiredStream>> gate_retired_;
  // context_seen(): read without a lock, appended under contexts_lock_.
  std::array<std::atomic<CUcontext>, kMaxContexts> contexts_{};
  std::atomic<std::size_t> context_count_{0};
  std::mutex contexts_lock_;
  mutable std::mutex lock_;
  std::unordered_map<CUstream, Entry> streams_;
  std::vector<std::shared_ptr<RetiredStream>> retired_;
};

}  // namespace tidepool::order
