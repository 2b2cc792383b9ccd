// See free_fences.hpp for the rule and its argument.
#include "order/free_fences.hpp"

#include <algorithm>

namespace tidepool::order {

FreeFences::FreeFences(const driver::Api& api, CUcontext context, StreamRegistry& registry, EventCache& events)
    : api_(api), context_(context), registry_(registry), events_(events) {}

FreeFences::~FreeFences() {
  // The owner waits (take_finished with a wait) before tearing down; what is
  // left here is only the events.
  for (Fence& fence : fences_) {
    for (CUevent e : fence.events) (void)api_.eventDestroy(e);
  }
}

bool FreeFences::capture_in_progress() const { return registry_.capture_in_progress(context_); }

void FreeFences::close_batch(bool needs_sync) {
  if (held_ == fenced_) return;
  Fence fence;
  fence.end = held_;
  fence.needs_sync = needs_sync || !registry_.complete();
  if (fence.needs_sync) {
    // Only a synchronisation proves this fence: events would be wasted calls.
    // The retirements are still listed, so that synchronisation settles them.
    scratch_streams_.clear();
    registry_.fence_targets(context_, &scratch_streams_, &fence.retired);
    fences_.push_back(std::move(fence));
    fenced_ = held_;
    return;
  }
  auto record = [&](CUstream stream) {
    if (driver::capturing(api_, stream)) {
      fence.needs_sync = true;
      return;
    }
    CUevent e = events_.take();
    if (e == nullptr) {
      fence.needs_sync = true;
      return;
    }
    if (api_.eventRecord(e, stream) != CUDA_SUCCESS) {
      events_.give_back(e);
      fence.needs_sync = true;
      return;
    }
    fence.events.push_back(e);
  };
  scratch_streams_.clear();
  registry_.fence_targets(context_, &scratch_streams_, &fence.retired);
  record(nullptr);  // the legacy stream: covers every blocking stream
  for (CUstream s : scratch_streams_) record(s);
  fences_.push_back(std::move(fence));
  fenced_ = held_;
}

void FreeFences::fence_when_idle() {
  if (held_ == fenced_) return;
  if (!fences_.empty()) {
    const Fence& newest = fences_.back();
    if (newest.needs_sync) return;  // only a synchronisation settles it; the next hand-back fences these
    for (CUevent e : newest.events) {
      if (api_.eventQuery(e) != CUDA_SUCCESS) return;  // still in flight (or not known)
    }
  }
  close_batch();
}

bool FreeFences::fence_finished(Fence& fence, bool wait) {
  if (fence.needs_sync) return false;
  for (CUevent e : fence.events) {
    const CUresult r = wait ? api_.eventSynchronize(e) : api_.eventQuery(e);
    if (r == CUDA_SUCCESS) continue;
    if (r != CUDA_ERROR_NOT_READY) fence.needs_sync = true;  // not known to be finished
    return false;
  }
  for (const auto& retired : fence.retired) {
    if (retired->finished()) continue;
    if (wait && retired->event() != nullptr && api_.eventSynchronize(retired->event()) == CUDA_SUCCESS &&
        retired->finished()) {
      continue;
    }
    if (wait) fence.needs_sync = true;
    return false;
  }
  return true;
}

bool FreeFences::synchronize_context() {
  if (api_.ctxSynchronize == nullptr || capture_in_progress()) return false;
  return api_.ctxSynchronize() == CUDA_SUCCESS;
}

std::size_t FreeFences::take_finished(Wait wait) {
  if (held_ == 0) return 0;
  // A waiting caller needs every free fenced; one that only looks keeps the
  // one-record-per-round-trip throttle.
  if (wait == Wait::none) {
    fence_when_idle();
  } else {
    close_batch();
  }
  std::size_t done = 0;
  while (done < fences_.size() && fence_finished(fences_[done], wait != Wait::none)) ++done;
  if (done < fences_.size() && wait == Wait::everything && fences_[done].needs_sync) {
    // Every fence made so far predates this synchronisation: it proves all.
    if (synchronize_context()) {
      for (Fence& fence : fences_) {
        for (const auto& retired : fence.retired) retired->mark_finished();
      }
      done = fences_.size();
    }
  }
  if (done == 0) return 0;
  const std::size_t ready = fences_[done - 1].end;
  for (std::size_t i = 0; i < done; ++i) drop(fences_[i]);
  fences_.erase(fences_.begin(), fences_.begin() + static_cast<std::ptrdiff_t>(done));
  for (Fence& fence : fences_) fence.end -= ready;
  held_ -= ready;
  fenced_ -= ready;
  return ready;
}

void FreeFences::take_all() {
  for (Fence& fence : fences_) drop(fence);
  fences_.clear();
  held_ = 0;
  fenced_ = 0;
}

void FreeFences::drop(Fence& fence) {
  for (CUevent e : fence.events) {
    if (fence.needs_sync) {
      (void)api_.eventDestroy(e);
    } else {
      events_.give_back(e);
    }
  }
  fence.events.clear();
}

}  // namespace tidepool::order
