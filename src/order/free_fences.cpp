// See free_fences.hpp for the rule (and context_fence.hpp for why a fence covers every stream).
#include "order/free_fences.hpp"

#include <utility>

namespace tidepool::order {

FreeFences::FreeFences(const driver::Api& api, CUcontext context, StreamRegistry& registry, EventCache& events)
    : api_(api), context_(context), registry_(registry), events_(events) {}

FreeFences::~FreeFences() {
  // The owner waits (take_finished with a wait) before tearing down; what is
  // left here is only the events.
  for (Fence& fence : fences_) fence.fence.destroy(api_);
}

bool FreeFences::capture_in_progress() const { return registry_.capture_in_progress(context_); }

void FreeFences::close_batch(bool needs_sync) {
  if (held_ == fenced_) return;
  Fence fence;
  fence.end = held_;
  (void)fence.fence.record(api_, events_, registry_, context_, &scratch_streams_, needs_sync);
  fences_.push_back(std::move(fence));
  fenced_ = held_;
}

void FreeFences::fence_when_idle() {
  if (held_ == fenced_) return;
  if (!fences_.empty()) {
    // Still in flight, not known, or only a synchronisation settles it: the
    // next hand-back fences these.
    if (fences_.back().fence.query(api_) != CUDA_SUCCESS) return;
  }
  close_batch();
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
  while (done < fences_.size() && fences_[done].fence.finished(api_, wait != Wait::none)) ++done;
  if (done < fences_.size() && wait == Wait::everything && fences_[done].fence.needs_sync()) {
    // Every fence made so far predates this synchronisation: it proves all.
    if (synchronize_context()) {
      for (Fence& fence : fences_) fence.fence.synchronized();
      done = fences_.size();
    }
  }
  if (done == 0) return 0;
  const std::size_t ready = fences_[done - 1].end;
  for (std::size_t i = 0; i < done; ++i) fences_[i].fence.release(api_, events_);
  fences_.erase(fences_.begin(), fences_.begin() + static_cast<std::ptrdiff_t>(done));
  for (Fence& fence : fences_) fence.end -= ready;
  held_ -= ready;
  fenced_ -= ready;
  return ready;
}

void FreeFences::take_all() {
  for (Fence& fence : fences_) fence.fence.release(api_, events_);
  fences_.clear();
  held_ = 0;
  fenced_ = 0;
}

}  // namespace tidepool::order
