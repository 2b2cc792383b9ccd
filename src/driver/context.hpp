// ScopedContext: makes a context current on this thread for the lifetime of
// the guard and restores the caller's afterwards. tidepool's slow paths call
// the driver from whatever thread the program allocated on, which may have
// another context (or none) current.
#pragma once

#include "driver/driver.hpp"

namespace tidepool::driver {

class ScopedContext {
 public:
  ScopedContext(const Api& api, CUcontext context) noexcept : api_(api) {
    if (context == nullptr) return;
    if (api_.ctxGetCurrent(&previous_) == CUDA_SUCCESS && previous_ != context) {
      switched_ = api_.ctxSetCurrent(context) == CUDA_SUCCESS;
    }
  }
  ~ScopedContext() {
    if (switched_) (void)api_.ctxSetCurrent(previous_);
  }
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

 private:
  const Api& api_;
  CUcontext previous_ = nullptr;
  bool switched_ = false;
};

}  // namespace tidepool::driver
