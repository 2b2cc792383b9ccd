// See context_fence.hpp.
#include "order/context_fence.hpp"

#include <algorithm>

namespace tidepool::order {

ContextFence::Gap ContextFence::record(const driver::Api& api, EventCache& events, StreamRegistry& registry,
                                       CUcontext context, std::vector<CUstream>* streams, bool known_gap,
                                       std::span<const CUstream> own_streams) {
  recorded_ = true;
  streams->assign(1, nullptr);  // the legacy stream first: its event covers every blocking stream
  registry.fence_targets(context, streams, &retired_);
  streams->insert(streams->end(), own_streams.begin(), own_streams.end());
  const bool unseen = known_gap || !registry.complete() ||
                      std::any_of(retired_.begin(), retired_.end(), [](const auto& r) { return !r->recorded(); });
  if (unseen) {
    // Only a synchronisation proves it: events would be wasted calls.
    gap_ = Gap::unseen;
    return gap_;
  }
  for (CUstream stream : *streams) {
    if (driver::capturing(api, stream)) {
      gap_ = Gap::capturing;
      break;
    }
    CUevent event = events.take();
    if (event == nullptr) {
      gap_ = Gap::failed;
      break;
    }
    if (api.eventRecord(event, stream) != CUDA_SUCCESS) {
      (void)api.eventDestroy(event);
      gap_ = Gap::failed;
      break;
    }
    events_.push_back(event);
  }
  return gap_;
}

CUresult ContextFence::query(const driver::Api& api) {
  if (!recorded_ || needs_sync()) return CUDA_ERROR_NOT_READY;
  for (CUevent event : events_) {
    const CUresult r = api.eventQuery(event);
    if (r == CUDA_SUCCESS) continue;
    if (r != CUDA_ERROR_NOT_READY) gap_ = Gap::failed;
    return r;
  }
  for (const auto& retired : retired_) {
    if (!retired->finished()) return CUDA_ERROR_NOT_READY;
  }
  return CUDA_SUCCESS;
}

bool ContextFence::finished(const driver::Api& api, bool wait) {
  if (!wait) return query(api) == CUDA_SUCCESS;
  if (!recorded_ || needs_sync()) return false;
  for (CUevent event : events_) {
    if (api.eventSynchronize(event) != CUDA_SUCCESS) {
      gap_ = Gap::failed;
      return false;
    }
  }
  for (const auto& retired : retired_) {
    if (retired->finished()) continue;
    if (retired->event() != nullptr && api.eventSynchronize(retired->event()) == CUDA_SUCCESS && retired->finished()) {
      continue;
    }
    gap_ = Gap::unseen;
    return false;
  }
  return true;
}

void ContextFence::synchronized() noexcept {
  for (const auto& retired : retired_) retired->mark_finished();
}

void ContextFence::release(const driver::Api& api, EventCache& events) {
  for (CUevent event : events_) {
    if (needs_sync()) {
      (void)api.eventDestroy(event);
    } else {
      events.give_back(event);
    }
  }
  events_.clear();
}

void ContextFence::destroy(const driver::Api& api) {
  for (CUevent event : events_) (void)api.eventDestroy(event);
  events_.clear();
}

}  // namespace tidepool::order
