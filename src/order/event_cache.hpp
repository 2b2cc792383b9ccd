// EventCache: CUDA events kept for reuse, so fences on the slow path create
// events only until the cache has enough. Every event is created in, and
// destroyed with, its owner's context (a pool's, a transit's); the caller
// makes that context current. Not thread-safe: the owner's lock guards it.
#pragma once

#include <cuda.h>

#include <vector>

#include "driver/driver.hpp"

namespace tidepool::order {

class EventCache {
 public:
  // `flags`: what cuEventCreate is given (timing is off unless asked for).
  explicit EventCache(const driver::Api& api, unsigned flags = CU_EVENT_DISABLE_TIMING) : api_(api), flags_(flags) {}
  ~EventCache() { clear(); }
  EventCache(const EventCache&) = delete;
  EventCache& operator=(const EventCache&) = delete;

  // A spare event, or a new one; null when the driver cannot make one.
  CUevent take() {
    if (!spare_.empty()) {
      CUevent e = spare_.back();
      spare_.pop_back();
      return e;
    }
    CUevent e = nullptr;
    if (api_.eventCreate(&e, flags_) != CUDA_SUCCESS) return nullptr;
    return e;
  }
  void give_back(CUevent event) {
    if (event != nullptr) spare_.push_back(event);
  }
  // Destroys the spare events (with the owning context current).
  void clear() {
    for (CUevent e : spare_) (void)api_.eventDestroy(e);
    spare_.clear();
  }

 private:
  const driver::Api& api_;
  unsigned flags_;
  std::vector<CUevent> spare_;
};

}  // namespace tidepool::order
