// See stream_registry.hpp.
#include "order/stream_registry.hpp"

#include <algorithm>

#include "driver/driver.hpp"

namespace tidepool::order {

namespace {

bool special_handle(CUstream stream) {
  return stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD;
}

}  // namespace

RetiredStream::~RetiredStream() {
  if (event_ == nullptr || api_.eventDestroy == nullptr) return;
  driver::ScopedContext scope(api_, context_);
  (void)api_.eventDestroy(event_);
}

bool RetiredStream::finished() {
  if (finished_.load(std::memory_order_acquire)) return true;
  if (!recorded_ || api_.eventQuery(event_) != CUDA_SUCCESS) return false;  // not ready, or unknown
  finished_.store(true, std::memory_order_release);
  return true;
}

void StreamRegistry::created(CUstream stream, bool through_hooks) {
  if (special_handle(stream)) return;
  std::lock_guard<std::mutex> creations(creation_lock_);
  Entry entry;
  CUgreenCtx green = nullptr;
  if (api_.streamGetCtx == nullptr || api_.streamGetCtx(stream, &entry.context, &green) != CUDA_SUCCESS) {
    (void)api_.ctxGetCurrent(&entry.context);
  }
  unsigned flags = 0;
  // Unknown flags read as non-blocking: a fence then covers the stream itself.
  entry.non_blocking = api_.streamGetFlags == nullptr || api_.streamGetFlags(stream, &flags) != CUDA_SUCCESS ||
                       (flags & CU_STREAM_NON_BLOCKING) != 0;
  {
    std::lock_guard<std::mutex> guard(lock_);
    streams_[stream] = entry;
  }
  legacy_only_.store(false, std::memory_order_release);
  // Memory the pools hand out may still be in use by work queued before a
  // device barrier; a non-blocking stream does not wait for the legacy
  // stream, so it starts behind the barrier instead. (A blocking one waits
  // for the legacy stream, which is behind it.)
  if (!entry.non_blocking) return;
  // Whatever follows leaves it behind the newest barrier (or the host waited
  // for that). A stream met only later may have had work queued unseen, and
  // may again: it is joined and made to wait by every barrier.
  Barrier& barrier = barriers_[entry.context];
  if (through_hooks) {
    (void)followers_.track(stream, entry.context, &barrier.generation,
                           barrier.generation.load(std::memory_order_relaxed));
  }
  // Barriers made by the legacy stream's order left no event: the barrier to
  // start behind is a record of the legacy stream's work so far. Later
  // barriers queue theirs (legacy_only no longer holds).
  if (barrier.in_order && !record_for_in_order_barriers(entry.context, &barrier)) return;
  if (barrier.after == nullptr) return;
  const CUresult state = api_.eventQuery(barrier.after);
  if (state == CUDA_SUCCESS) return;
  if (state == CUDA_ERROR_NOT_READY && api_.streamWaitEvent(stream, barrier.after, 0) == CUDA_SUCCESS) return;
  host_waits_for_the_barrier(entry.context, barrier.after);
}

void StreamRegistry::host_waits_for_the_barrier(CUcontext context, CUevent after) {
  // The stream cannot be made to wait: the host waits instead (stream
  // creation is rare), so nothing it runs can overlap work before the
  // barrier. Only if that fails too are fences left to what proves them
  // without the registry.
  driver::ScopedContext scope(api_, context);
  if (after != nullptr && api_.eventSynchronize(after) == CUDA_SUCCESS) return;
  if (api_.ctxSynchronize != nullptr && !capture_in_progress(context) && api_.ctxSynchronize() == CUDA_SUCCESS) {
    return;
  }
  set_complete(false);
}

StreamRegistry::BarrierKind StreamRegistry::device_barrier(CUcontext context) {
  // created() must be able to put a new stream behind the legacy stream's work.
  if (complete() && legacy_only() && api_.eventRecord != nullptr && api_.streamWaitEvent != nullptr) {
    std::lock_guard<std::mutex> creations(creation_lock_);
    if (legacy_only() && !first_context_is(context)) {
      several_contexts_locked();  // a barrier in a second context: its legacy stream orders nothing of the first's
    }
    if (legacy_only()) {
      Barrier& barrier = barriers_[context];
      barrier.in_order = true;
      barrier.made_in_order = true;
      in_order_outstanding_.store(true, std::memory_order_release);
      return BarrierKind::in_order;
    }
  }
  return join_and_hold(context, nullptr);
}

void StreamRegistry::overlapping_launch(CUcontext context) {
  std::lock_guard<std::mutex> creations(creation_lock_);
  legacy_only_.store(false, std::memory_order_release);
  auto barrier = barriers_.find(context);
  if (barrier == barriers_.end() || !barrier->second.in_order) return;
  // An overlap is allowed only between a kernel and the one right after it:
  // a record between them is the barrier the in-order ones stood for. It
  // also stands for them when a non-blocking stream is created (created()).
  (void)record_for_in_order_barriers(context, &barrier->second);
}

void StreamRegistry::several_contexts() {
  std::lock_guard<std::mutex> creations(creation_lock_);
  several_contexts_locked();
}

void StreamRegistry::several_contexts_locked() {
  legacy_only_.store(false, std::memory_order_release);
  if (!several_contexts_seen_.exchange(true, std::memory_order_acq_rel)) {
    // Blocks put back behind a queued barrier go to any request at once,
    // and from now on that may be another context's, whose work the barrier
    // does not order: the host waits once for each context's newest one.
    for (auto& [context, barrier] : barriers_) {
      if (!barrier.made_in_order && barrier.after != nullptr) host_waits_for_the_barrier(context, barrier.after);
    }
  }
  if (!in_order_outstanding_.load(std::memory_order_acquire)) return;
  // Blocks those barriers gave back go to any work at once, whatever ended
  // legacy_only before (a per-thread stream, a blocking stream: both follow
  // the legacy stream of their own context only).
  for (auto& [context, barrier] : barriers_) {
    if (!barrier.made_in_order) continue;
    barrier.in_order = false;
    barrier.made_in_order = false;
    host_waits_for_the_barrier(context, nullptr);
  }
  in_order_outstanding_.store(false, std::memory_order_release);
}

bool StreamRegistry::first_context_is(CUcontext context) {
  CUcontext first = first_context_.load(std::memory_order_acquire);
  if (first == nullptr && first_context_.compare_exchange_strong(first, context, std::memory_order_acq_rel)) {
    return true;
  }
  return first == context;
}

void StreamRegistry::made_current(CUcontext context) {
  if (context == nullptr) return;
  context_seen(context);
  if (first_context_is(context)) return;
  if (one_context() || legacy_only() || in_order_outstanding_.load(std::memory_order_acquire)) several_contexts();
}

void StreamRegistry::context_seen(CUcontext context) {
  const auto known = [&] {
    const std::size_t count = context_count_.load(std::memory_order_acquire);
    for (std::size_t i = 0; i < count; ++i) {
      if (contexts_[i].load(std::memory_order_relaxed) == context) return true;
    }
    return false;
  };
  if (context == nullptr || known()) return;
  std::lock_guard<std::mutex> guard(contexts_lock_);
  const std::size_t count = context_count_.load(std::memory_order_relaxed);
  if (known() || count == kMaxContexts) return;
  contexts_[count].store(context, std::memory_order_relaxed);
  context_count_.store(count + 1, std::memory_order_release);
}

bool StreamRegistry::wait_for_contexts_but(CUcontext except) {
  CUcontext previous = nullptr;
  if (api_.ctxGetCurrent(&previous) != CUDA_SUCCESS) return false;
  bool all = true;
  CUcontext current = previous;
  const std::size_t count = context_count_.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < count; ++i) {
    CUcontext context = contexts_[i].load(std::memory_order_relaxed);
    if (context == except) continue;
    // Made current, or skipped: never the wrong context synchronised.
    if (context != current && api_.ctxSetCurrent(context) != CUDA_SUCCESS) {
      all = false;
      continue;
    }
    current = context;
    if (capture_in_progress(context) || api_.ctxSynchronize() != CUDA_SUCCESS) all = false;
  }
  if (current != previous) (void)api_.ctxSetCurrent(previous);
  return all;
}

bool StreamRegistry::record_for_in_order_barriers(CUcontext context, Barrier* barrier) {
  barrier->in_order = false;
  barrier->after_current = false;  // legacy_work_ was not cleared before this record
  driver::ScopedContext scope(api_, context);
  // A record while a stream captures would join or break the capture.
  CUevent now = capture_in_progress(context) ? nullptr : barrier_event(&barrier->after);
  if (now != nullptr && api_.eventRecord(now, nullptr) == CUDA_SUCCESS) return true;
  if (now != nullptr) {  // never recorded: a later stream must not read it as a barrier passed
    (void)api_.eventDestroy(now);
    barrier->after = nullptr;
  }
  host_waits_for_the_barrier(context, nullptr);
  return false;
}

CUevent StreamRegistry::barrier_event(CUevent* slot) {
  if (*slot == nullptr && api_.eventCreate(slot, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) *slot = nullptr;
  return *slot;
}

bool StreamRegistry::device_gate(CUcontext context, const std::function<bool(CUstream* ends_on)>& on_legacy) {
  return join_and_hold(context, on_legacy) != BarrierKind::failed;
}

StreamRegistry::BarrierKind StreamRegistry::join_and_hold(CUcontext context,
                                                          const std::function<bool(CUstream* ends_on)>& on_legacy) {
  constexpr BarrierKind failed = BarrierKind::failed;
  if (!complete() || api_.streamWaitEvent == nullptr) return failed;
  std::lock_guard<std::mutex> creations(creation_lock_);
  std::vector<CUstream>& streams = gate_streams_;
  std::vector<StreamFollowers::Slot*>& slots = gate_slots_;
  std::vector<std::shared_ptr<RetiredStream>>& retired = gate_retired_;
  streams.clear();
  slots.clear();
  retired.clear();
  fence_targets(context, &streams, &retired);
  // A followed stream with nothing queued since its last join needs no join;
  // after a barrier it needs no wait either, until its next submission. A
  // gate's moves concern live blocks that any stream may be about to use:
  // every stream waits for it now.
  const bool follows = follows_submissions_.load(std::memory_order_acquire);
  const bool lazy = follows && !on_legacy;
  // One reading of each stream's mark decides its join: a mark made after it
  // is a concurrent submission's, which this barrier need not cover (and
  // which keeps the mark for the next one).
  std::vector<bool>& join = gate_joins_;
  join.clear();
  std::size_t joins = 0;
  std::size_t waits = 0;
  for (CUstream s : streams) {
    StreamFollowers::Slot* slot = follows ? followers_.find(s) : nullptr;
    slots.push_back(slot);
    join.push_back(slot == nullptr || slot->unjoined.load(std::memory_order_acquire));
    joins += join.back() ? 1 : 0;
    waits += lazy && slot != nullptr ? 0 : 1;
  }
  if (std::max(joins, waits) > kMaxBarrierStreams) return failed;
  Barrier& barrier = barriers_[context];
  // Nothing to join or make wait, and no work on the legacy stream since the
  // newest barrier event: that event stands for this barrier too, and every
  // stream that followed it is behind this one. (A retired stream's wait
  // would be work the event does not cover.)
  if (lazy && joins == 0 && waits == 0 && legacy_tail_recorded(context, barrier) &&
      std::all_of(retired.begin(), retired.end(), [](const auto& r) { return r->finished(); })) {
    return BarrierKind::standing;
  }
  barrier.after_current = false;
  // Cleared before anything is queued: a submission marked after this may
  // have been queued after the legacy stream's part in the record below
  // (a gate's `on_legacy` may end it on a stream of its own, behind a
  // record it made on the legacy stream first), and keeps its mark.
  legacy_work_.store(false, std::memory_order_release);
  // A record or wait on a capturing stream (or on the legacy stream while a
  // blocking one captures) would join or break the capture. (A stream
  // neither joined nor made to wait now is asked at its catch-up.)
  if (driver::capturing(api_, nullptr)) return failed;
  for (std::size_t i = 0; i < streams.size(); ++i) {
    const bool touched = join[i] || !lazy || slots[i] == nullptr;
    if (touched && driver::capturing(api_, streams[i])) return failed;
  }
  if (barrier.joins.size() < joins) barrier.joins.resize(joins, nullptr);
  std::size_t joined = 0;
  for (std::size_t i = 0; i < streams.size(); ++i) {
    if (!join[i]) continue;
    StreamFollowers::Slot* slot = slots[i];
    // Cleared before the record: work queued after the record marks it again
    // once its call returns (submitted()).
    if (slot != nullptr) slot->unjoined.store(false, std::memory_order_release);
    CUevent event = barrier_event(&barrier.joins[joined++]);
    if (event == nullptr || api_.eventRecord(event, streams[i]) != CUDA_SUCCESS ||
        api_.streamWaitEvent(nullptr, event, 0) != CUDA_SUCCESS) {
      if (slot != nullptr) slot->unjoined.store(true, std::memory_order_release);
      return failed;
    }
  }
  for (const auto& r : retired) {
    if (r->finished()) continue;
    if (!r->recorded() || api_.streamWaitEvent(nullptr, r->event(), 0) != CUDA_SUCCESS) return failed;
  }
  CUstream ends_on = nullptr;
  if (on_legacy && !on_legacy(&ends_on)) return failed;
  CUevent after = barrier_event(&barrier.after);
  if (after == nullptr || api_.eventRecord(after, ends_on) != CUDA_SUCCESS) return failed;
  if (ends_on != nullptr && api_.streamWaitEvent(nullptr, after, 0) != CUDA_SUCCESS) return failed;
  const std::uint64_t generation = barrier.generation.load(std::memory_order_relaxed);
  for (std::size_t i = 0; i < streams.size(); ++i) {
    if (lazy && slots[i] != nullptr) continue;  // at its next submission
    if (api_.streamWaitEvent(streams[i], after, 0) != CUDA_SUCCESS) return failed;
    // Behind this gate, so behind every barrier before it.
    if (slots[i] != nullptr) slots[i]->followed.store(generation, std::memory_order_release);
  }
  if (lazy) barrier.generation.store(generation + 1, std::memory_order_release);
  barrier.after_current = true;
  return BarrierKind::queued;
}

bool StreamRegistry::legacy_tail_recorded(CUcontext context, const Barrier& barrier) const noexcept {
  return barrier.after_current && one_context() && first_context_.load(std::memory_order_acquire) == context &&
         !legacy_work_.load(std::memory_order_acquire);
}

void StreamRegistry::catch_up(CUstream stream, StreamFollowers::Slot* slot) noexcept {
  std::lock_guard<std::mutex> creations(creation_lock_);
  const std::uint64_t newest = slot->generation->load(std::memory_order_acquire);
  if (slot->followed.load(std::memory_order_acquire) >= newest) return;  // another submission caught up first
  // Work captured now runs when its graph is launched, and the launch's own
  // stream catches up then; a wait here would join or break the capture.
  if (driver::capturing(api_, stream)) return;
  auto barrier = barriers_.find(slot->context);
  CUevent after = barrier == barriers_.end() ? nullptr : barrier->second.after;
  if (after == nullptr || api_.streamWaitEvent(stream, after, 0) != CUDA_SUCCESS) {
    host_waits_for_the_barrier(slot->context, after);
  }
  slot->followed.store(newest, std::memory_order_release);
}

bool StreamRegistry::capture_in_progress(CUcontext context) {
  if (driver::capturing(api_, nullptr)) return true;  // the legacy stream, or a blocking stream
  std::vector<CUstream> streams;
  {
    std::lock_guard<std::mutex> guard(lock_);
    for (const auto& [stream, entry] : streams_) {
      if (entry.non_blocking && entry.context == context) streams.push_back(stream);
    }
  }
  return std::any_of(streams.begin(), streams.end(), [&](CUstream s) { return driver::capturing(api_, s); });
}

bool StreamRegistry::destroying(CUstream stream) {
  if (special_handle(stream)) return false;
  Entry entry;
  {
    std::lock_guard<std::mutex> guard(lock_);
    auto it = streams_.find(stream);
    if (it == streams_.end()) return false;  // not a stream we saw: the driver will judge the handle
    entry = it->second;
  }
  // The stream stays registered until its retirement is in place, so a fence
  // made meanwhile covers it one way or the other.
  {
    std::lock_guard<std::mutex> creations(creation_lock_);
    followers_.forget(stream);  // barriers made from now on join it and make it wait, until it is gone
  }
  driver::ScopedContext scope(api_, entry.context);
  // A capturing stream cannot take a record outside its graph, yet work
  // queued before the capture began may still run: only a context
  // synchronisation (once the capture is over) proves it finished. The same
  // holds when the event cannot be made or recorded.
  const bool capturing = driver::capturing(api_, stream);
  CUevent event = nullptr;
  if (!capturing && api_.eventCreate(&event, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) event = nullptr;
  const bool recorded = event != nullptr && api_.eventRecord(event, stream) == CUDA_SUCCESS;
  auto retired = std::make_shared<RetiredStream>(api_, entry.context, event, recorded);
  std::lock_guard<std::mutex> guard(lock_);
  streams_.erase(stream);
  std::erase_if(retired_, [](const std::shared_ptr<RetiredStream>& r) { return r->finished(); });
  retired_.push_back(std::move(retired));
  return true;
}

void StreamRegistry::destroy_failed(CUstream stream) { created(stream); }

void StreamRegistry::fence_targets(CUcontext context, std::vector<CUstream>* non_blocking,
                                   std::vector<std::shared_ptr<RetiredStream>>* retired) {
  std::lock_guard<std::mutex> guard(lock_);
  for (const auto& [stream, entry] : streams_) {
    if (entry.non_blocking && entry.context == context) non_blocking->push_back(stream);
  }
  std::erase_if(retired_, [](const std::shared_ptr<RetiredStream>& r) { return r->finished(); });
  for (const auto& r : retired_) {
    if (r->context() == context) retired->push_back(r);
  }
}

bool StreamRegistry::alive(CUstream stream) const {
  std::lock_guard<std::mutex> guard(lock_);
  return streams_.contains(stream);
}

}  // namespace tidepool::order
