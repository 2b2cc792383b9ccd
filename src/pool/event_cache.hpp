// EventCache: CUDA events (timing disabled) kept for reuse, so fences on the
// slow path create events only until the cache has enough. Every event is
// created in, and destroyed with, the owning pool's context; the caller makes
// that context current. Not thread-safe: the owning pool's lock guards it.
#pragma once

#include <cuda.h>

#include <vector>

#include "driver/driver.hpp"

namespace tidepool::pool {

class EventCache {
 public:
  explicit EventCache(const driver::Api& api) : api_(api) {}
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
    if (api_.eventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return nullptr;
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
  std::vector<CUevent> spare_;
};

}  // namespace tidepool::pool
