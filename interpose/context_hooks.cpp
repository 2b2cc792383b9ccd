// Context hooks: cuCtxSetCurrent, cuCtxPushCurrent and cuCtxCreate (each
// ABI cuda.h has named; cudart's device switches reach them through
// cuGetProcAddress). They call the driver, then
// tell the runtime which context the thread now queues work in: the legacy
// stream of one context orders nothing of another's, so a second context
// ends the pools' legacy-order barriers (order/stream_registry.hpp).
#include <cuda.h>

#include "hooks.hpp"
#include "real_symbols.hpp"
#include "route.hpp"
#include "runtime/runtime.hpp"

namespace {

CUresult made_current(CUresult r, CUcontext context) {
  if (r == CUDA_SUCCESS && context != nullptr && tidepool::interpose::serving()) {
    tidepool::runtime::Runtime::get().context_made_current(context);
  }
  return r;
}

}  // namespace

TIDEPOOL_HOOK CUresult cuCtxSetCurrent(CUcontext context) {
  return made_current(TIDEPOOL_CALL_REAL_DRIVER(cuCtxSetCurrent, context), context);
}

TIDEPOOL_HOOK CUresult cuCtxPushCurrent_v2(CUcontext context) {
  return made_current(TIDEPOOL_CALL_REAL_DRIVER(cuCtxPushCurrent_v2, context), context);
}

// cuCtxCreate makes the new context current.
TIDEPOOL_HOOK CUresult cuCtxCreate_v2(CUcontext* context, unsigned int flags, CUdevice device) {
  const CUresult r = TIDEPOOL_CALL_REAL_DRIVER(cuCtxCreate_v2, context, flags, device);
  return made_current(r, r == CUDA_SUCCESS && context != nullptr ? *context : nullptr);
}

TIDEPOOL_HOOK CUresult cuCtxCreate_v3(CUcontext* context, CUexecAffinityParam* affinity, int count, unsigned int flags,
                                      CUdevice device) {
  const CUresult r = TIDEPOOL_CALL_REAL_DRIVER(cuCtxCreate_v3, context, affinity, count, flags, device);
  return made_current(r, r == CUDA_SUCCESS && context != nullptr ? *context : nullptr);
}

TIDEPOOL_HOOK CUresult cuCtxCreate_v4(CUcontext* context, CUctxCreateParams* params, unsigned int flags,
                                      CUdevice device) {
  const CUresult r = TIDEPOOL_CALL_REAL_DRIVER(cuCtxCreate_v4, context, params, flags, device);
  return made_current(r, r == CUDA_SUCCESS && context != nullptr ? *context : nullptr);
}
