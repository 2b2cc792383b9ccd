// Device memory the program makes itself with the driver's VMM calls:
// cuMemCreate and cuMemRelease (NCCL's buffers, among others). tidepool
// serves none of it; the runtime counts what each device holds this way,
// by caller, in the report and against the budget. tidepool's own VMM calls
// go through its driver table, never through these hooks.
#include <cuda.h>

#include "hooks.hpp"
#include "real_symbols.hpp"
#include "route.hpp"
#include "runtime/runtime.hpp"

TIDEPOOL_HOOK CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, std::size_t size,
                                   const CUmemAllocationProp* prop, unsigned long long flags) {
  const CUresult r = TIDEPOOL_CALL_REAL_DRIVER(cuMemCreate, handle, size, prop, flags);
  if (r == CUDA_SUCCESS && handle != nullptr && prop != nullptr && tidepool::interpose::serving()) {
    tidepool::runtime::Runtime::get().foreign_created(*handle, *prop, size, TIDEPOOL_CALLER());
  }
  return r;
}

TIDEPOOL_HOOK CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  const CUresult r = TIDEPOOL_CALL_REAL_DRIVER(cuMemRelease, handle);
  // The driver keeps mapped memory until its last unmap; the program let it
  // go, and that is what the budget follows.
  if (r == CUDA_SUCCESS && tidepool::interpose::serving()) tidepool::runtime::Runtime::get().foreign_released(handle);
  return r;
}
