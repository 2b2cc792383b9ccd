// Memory-pool hooks: cuDeviceSetMemPool and cuMemPoolDestroy (the runtime's
// cudaDeviceSetMemPool and cudaMemPoolDestroy reach them through the driver
// table). A program that makes a pool of its own a device's current pool
// expects cuMemAllocAsync to take from it; the runtime learns of each change
// and routes those allocations to the driver. Allocations that name a pool
// (cuMemAllocFromPoolAsync) are the driver's, and so are their frees (not
// being tidepool's pointers); the hooks only count them as device memory
// held outside the pool (route.hpp, driver_served).
#include <cuda.h>

#include "hooks.hpp"
#include "real_symbols.hpp"
#include "route.hpp"
#include "runtime/runtime.hpp"

TIDEPOOL_HOOK CUresult cuDeviceSetMemPool(CUdevice device, CUmemoryPool pool) {
  const CUresult r = TIDEPOOL_CALL_REAL_DRIVER(cuDeviceSetMemPool, device, pool);
  if (r == CUDA_SUCCESS && tidepool::interpose::serving()) tidepool::runtime::Runtime::get().memory_pools_changed();
  return r;
}

TIDEPOOL_HOOK CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  const CUresult r = TIDEPOOL_CALL_REAL_DRIVER(cuMemPoolDestroy, pool);
  if (r == CUDA_SUCCESS && tidepool::interpose::serving()) tidepool::runtime::Runtime::get().memory_pools_changed();
  return r;
}

TIDEPOOL_HOOK CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, std::size_t bytesize, CUmemoryPool pool,
                                               CUstream stream) {
  return tidepool::interpose::driver_served(
      TIDEPOOL_CALL_REAL_DRIVER(cuMemAllocFromPoolAsync, dptr, bytesize, pool, stream), dptr, bytesize,
      TIDEPOOL_CALLER());
}

TIDEPOOL_HOOK CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, std::size_t bytesize, CUmemoryPool pool,
                                                    CUstream stream) {
  return tidepool::interpose::driver_served(
      TIDEPOOL_CALL_REAL_DRIVER(cuMemAllocFromPoolAsync_ptsz, dptr, bytesize, pool, stream), dptr, bytesize,
      TIDEPOOL_CALLER());
}
