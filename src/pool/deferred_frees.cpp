// See deferred_frees.hpp for the rule and its argument.
#include "pool/deferred_frees.hpp"

#include <algorithm>

namespace tidepool::pool {

DeferredFrees::DeferredFrees(const driver::Api& api, CUcontext context, order::StreamRegistry& registry,
                             order::EventCache& events)
    : api_(api), context_(context), registry_(registry), events_(events) {
  blocks_.reserve(1024);
}

DeferredFrees::~DeferredFrees() {
  // The owner waits (promote with wait) before tearing down; whatever is
  // left here is only the events.
  for (Fence& fence : fences_) {
    for (CUevent e : fence.events) (void)api_.eventDestroy(e);
  }
}

void DeferredFrees::add(Block* block) {
  blocks_.push_back(block);
  bytes_ += block->size;
}

bool DeferredFrees::capture_in_progress() const {
  if (driver::capturing(api_, nullptr)) return true;  // a blocking stream captures
  std::vector<CUstream> streams;
  std::vector<std::shared_ptr<order::RetiredStream>> retired;
  registry_.fence_targets(context_, &streams, &retired);
  return std::any_of(streams.begin(), streams.end(), [&](CUstream s) { return driver::capturing(api_, s); });
}

void DeferredFrees::close_batch(bool needs_sync) {
  if (blocks_.size() == fenced_) return;
  Fence fence;
  fence.end = blocks_.size();
  fence.needs_sync = needs_sync || !registry_.complete();
  if (fence.needs_sync) {
    // Only a synchronisation proves this fence: events would be wasted calls.
    // The retirements are still listed, so that synchronisation settles them.
    scratch_streams_.clear();
    registry_.fence_targets(context_, &scratch_streams_, &fence.retired);
    fences_.push_back(std::move(fence));
    fenced_ = blocks_.size();
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
  fenced_ = blocks_.size();
}

void DeferredFrees::fence_when_idle() {
  if (blocks_.size() == fenced_) return;
  if (!fences_.empty()) {
    const Fence& newest = fences_.back();
    if (newest.needs_sync) return;  // only a synchronisation settles it; the next promotion fences these
    for (CUevent e : newest.events) {
      if (api_.eventQuery(e) != CUDA_SUCCESS) return;  // still in flight (or not known)
    }
  }
  close_batch();
}

bool DeferredFrees::fence_finished(Fence& fence, bool wait) {
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

bool DeferredFrees::synchronize_context() {
  if (api_.ctxSynchronize == nullptr || capture_in_progress()) return false;
  return api_.ctxSynchronize() == CUDA_SUCCESS;
}

std::size_t DeferredFrees::finished_prefix(Wait wait) {
  if (blocks_.empty()) return 0;
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
  for (std::size_t i = 0; i < done; ++i) {
    // An event of a fence that erred may have been recorded into a capture
    // that began meanwhile: it is not reused.
    for (CUevent e : fences_[i].events) {
      if (fences_[i].needs_sync) {
        (void)api_.eventDestroy(e);
      } else {
        events_.give_back(e);
      }
    }
  }
  fences_.erase(fences_.begin(), fences_.begin() + static_cast<std::ptrdiff_t>(done));
  for (Fence& fence : fences_) fence.end -= ready;
  return ready;
}

void DeferredFrees::drop_fences() {
  for (Fence& fence : fences_) {
    for (CUevent e : fence.events) {
      if (fence.needs_sync) {
        (void)api_.eventDestroy(e);
      } else {
        events_.give_back(e);
      }
    }
  }
  fences_.clear();
  fenced_ = blocks_.size();
}

void DeferredFrees::drop_prefix(std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) bytes_ -= blocks_[i]->size;
  fenced_ -= count;
}

}  // namespace tidepool::pool
