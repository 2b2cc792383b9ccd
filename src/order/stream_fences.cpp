// StreamFences: see stream_fences.hpp.
#include "order/stream_fences.hpp"

#include <algorithm>

namespace tidepool::order {

using stream_keys::fence_handle;
using stream_keys::is_per_thread_key;

util::Status StreamFences::check(std::uintptr_t key) {
  StreamState* state = last_state_;
  if (key != last_key_) {
    auto it = streams_.find(key);
    if (it == streams_.end()) {
      // First sight of a handle: the driver says whether it names a stream,
      // and of which context.
      StreamState fresh;
      if (key != 0 && !is_per_thread_key(key) && api_.streamGetCtx != nullptr) {
        CUcontext owner = nullptr;
        CUgreenCtx green = nullptr;
        const CUresult r = api_.streamGetCtx(reinterpret_cast<CUstream>(key), &owner, &green);
        if (r == CUDA_ERROR_INVALID_HANDLE || r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_CONTEXT_IS_DESTROYED) {
          return {util::Error::invalid_handle, "not a live stream", r};
        }
        fresh.other_context = r == CUDA_SUCCESS && owner != nullptr && owner != context_;
        // A stream created behind the hooks' back: fences must cover it too.
        if (!fresh.other_context && !registry_.alive(reinterpret_cast<CUstream>(key))) {
          registry_.created(reinterpret_cast<CUstream>(key), /*through_hooks=*/false);
        }
      }
      it = streams_.emplace(key, fresh).first;
    }
    last_key_ = key;
    last_state_ = state = &it->second;
  }
  if (state->other_context) return {util::Error::other_device, "a stream of another device"};
  return util::Status::success();
}

bool StreamFences::finished(std::uintptr_t key, std::uint64_t epoch) const {
  if (key == kNoPendingWork || epoch <= synchronized_epoch_) return true;
  auto it = streams_.find(key);
  return it != streams_.end() && epoch <= it->second.finished_epoch;
}

bool StreamFences::query(std::uintptr_t key, std::uint64_t epoch, std::uintptr_t may_wait_for, bool wait_for_barrier) {
  if (finished(key, epoch)) return true;
  StreamState& state = streams_[key];
  if (key == kAfterBarrier) {
    // The record behind the free's own barrier answers before one made now
    // at the tail of the queue would.
    const std::uint64_t done = barriers_.finished_through(wait_for_barrier ? epoch : 0);
    state.finished_epoch = std::max(state.finished_epoch, done);
    if (finished(key, epoch)) return true;
  }
  // A record still in flight is left to finish: recording again would only
  // push the answer later. Its completion settles every free before it.
  const bool may_wait = key == may_wait_for;
  auto done = [&] {
    const CUresult r = api_.eventQuery(state.event);
    if (r == CUDA_SUCCESS) return true;
    return r == CUDA_ERROR_NOT_READY && may_wait && api_.eventSynchronize(state.event) == CUDA_SUCCESS;
  };
  if (state.event != nullptr && state.recorded_epoch > state.finished_epoch) {
    if (!done()) return false;  // not ready, or not known
    state.finished_epoch = state.recorded_epoch;
    if (finished(key, epoch)) return true;
  }
  const CUstream handle = fence_handle(key);
  if (driver::capturing(api_, handle)) return false;
  if (state.event == nullptr) state.event = events_.take();
  if (state.event == nullptr || api_.eventRecord(state.event, handle) != CUDA_SUCCESS) return false;
  state.recorded_epoch = epoch_;
  if (!done()) return false;
  state.finished_epoch = state.recorded_epoch;
  return finished(key, epoch);
}

util::Status StreamFences::order_after(std::uintptr_t key, std::uint64_t epoch, std::uintptr_t stream, bool ordered,
                                       bool* had_to_wait) {
  StreamState& state = streams_[key];
  const CUstream handle = fence_handle(key);
  if (state.event == nullptr || state.recorded_epoch < epoch) {
    // The last record predates this free: record now. It covers the free
    // and perhaps later work too, which is safe, only conservative.
    if (driver::capturing(api_, handle)) return {util::Error::driver_error, "the stream is capturing"};
    if (state.event == nullptr) state.event = events_.take();
    if (state.event == nullptr) return {util::Error::driver_error, "cuEventCreate failed"};
    if (auto s = driver::check(api_.eventRecord(state.event, handle), "cuEventRecord"); !s) return s;
    state.recorded_epoch = epoch_;
  }
  const CUresult query = api_.eventQuery(state.event);
  if (query == CUDA_SUCCESS) {
    state.finished_epoch = std::max(state.finished_epoch, state.recorded_epoch);
    return util::Status::success();
  }
  if (query != CUDA_ERROR_NOT_READY) return driver::check(query, "cuEventQuery");
  *had_to_wait = true;
  if (ordered) return driver::check(api_.streamWaitEvent(fence_handle(stream), state.event, 0), "cuStreamWaitEvent");
  if (auto s = driver::check(api_.eventSynchronize(state.event), "cuEventSynchronize"); !s) return s;
  state.finished_epoch = std::max(state.finished_epoch, state.recorded_epoch);
  return util::Status::success();
}

bool StreamFences::synchronize(bool capture_in_progress) {
  if (api_.ctxSynchronize == nullptr || capture_in_progress) return false;
  if (api_.ctxSynchronize() != CUDA_SUCCESS) return false;
  synchronized_epoch_ = epoch_;
  unsynchronized_ = false;
  return true;
}

void StreamFences::forget(std::uintptr_t key) {
  auto it = streams_.find(key);
  if (it == streams_.end()) return;
  events_.give_back(it->second.event);
  streams_.erase(it);
  last_key_ = kNoPendingWork;
  last_state_ = nullptr;
}

void StreamFences::clear() {
  for (auto& [key, state] : streams_) {
    if (state.event != nullptr) (void)api_.eventDestroy(state.event);
  }
  streams_.clear();
  last_key_ = kNoPendingWork;
  last_state_ = nullptr;
}

}  // namespace tidepool::order
