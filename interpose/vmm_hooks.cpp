// Device memory the program makes itself with the driver's VMM calls:
// cuMemCreate, cuMemMap, cuMemUnmap and cuMemRelease (NCCL's buffers, among
// others): the driver holds it until it is released and unmapped. tidepool
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
  if (r == CUDA_SUCCESS && tidepool::interpose::serving()) tidepool::runtime::Runtime::get().foreign_released(handle);
  return r;
}

TIDEPOOL_HOOK CUresult cuMemMap(CUdeviceptr ptr, std::size_t size, std::size_t offset,
                                CUmemGenericAllocationHandle handle, unsigned long long flags) {
  const CUresult r = TIDEPOOL_CALL_REAL_DRIVER(cuMemMap, ptr, size, offset, handle, flags);
  if (r == CUDA_SUCCESS && tidepool::interpose::serving()) {
    tidepool::runtime::Runtime::get().foreign_mapped(static_cast<std::uintptr_t>(ptr), size, handle);
  }
  return r;
}

TIDEPOOL_HOOK CUresult cuMemUnmap(CUdeviceptr ptr, std::size_t size) {
  const CUresult r = TIDEPOOL_CALL_REAL_DRIVER(cuMemUnmap, ptr, size);
  if (r == CUDA_SUCCESS && tidepool::interpose::serving()) {
    tidepool::runtime::Runtime::get().foreign_unmapped(static_cast<std::uintptr_t>(ptr), size);
  }
  return r;
}
