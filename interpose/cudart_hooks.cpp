// CUDA runtime API (cudart) hooks, for programs with a shared cudart: cudaMalloc, cudaFree,
// their async and pitched forms, and cudaMemGetInfo. Each translates, calls
// the runtime and translates back; anything tidepool does not serve goes to
// the program's own cudart. (A static cudart never calls these: it reaches
// the driver hooks through cuGetProcAddress.)
//
// Errors are recorded where cudart records them, so cudaGetLastError and
// cudaPeekAtLastError report a failure of ours as they would the driver's:
// the real cudart is asked to fail the same way on a call that touches
// nothing (a null result pointer, an impossible pinned allocation).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <limits>

#include "hooks.hpp"
#include "real_symbols.hpp"
#include "route.hpp"
#include "runtime/runtime.hpp"
#include "translate.hpp"

namespace tidepool::interpose {

namespace {

cudaError_t record(cudaError_t error) {
  switch (error) {
    case cudaErrorInvalidValue:
      if (auto real = TIDEPOOL_NEXT(cudaMalloc)) (void)real(nullptr, 1);
      break;
    case cudaErrorMemoryAllocation:
      if (auto real = TIDEPOOL_NEXT(cudaMallocHost)) {
        void* never = nullptr;
        (void)real(&never, std::numeric_limits<std::size_t>::max());
      }
      break;
    default: break;
  }
  return error;
}

// The cudart's current device, or -1 when cudart cannot say (then the call
// goes to cudart, which reports why).
int current_device() {
  auto get = TIDEPOOL_NEXT(cudaGetDevice);
  int device = -1;
  if (get == nullptr || get(&device) != cudaSuccess) return -1;
  return device;
}

// Serves an allocation from the pool. Returns false when it should go to
// cudart instead; otherwise *status is the caller's answer.
bool allocate(void** ptr, std::size_t size, cudaStream_t stream, bool ordered, std::uintptr_t caller,
              cudaError_t* status) {
  if (ptr == nullptr || size == 0 || !serving()) return false;
  const int device = current_device();
  if (device < 0) return false;
  const Route route = route_allocation_on(device, reinterpret_cast<CUstream>(stream), ordered);
  if (route.allocator == nullptr) {
    if (route.error == CUDA_SUCCESS) return false;
    *status = record(to_cuda_error(route.error));
    return true;
  }
  auto result = allocate_on(*route.allocator, size, reinterpret_cast<CUstream>(stream), ordered, caller);
  if (!result) {
    *status = record(to_cuda_error(result.status()));
    return true;
  }
  *ptr = reinterpret_cast<void*>(result.value());
  *status = cudaSuccess;
  return true;
}

// Frees a pool block. Returns false when the pointer is not tidepool's.
bool release(void* ptr, cudaStream_t stream, bool ordered, cudaError_t* status) {
  util::Status s;
  if (!free_in_pools(reinterpret_cast<std::uintptr_t>(ptr), reinterpret_cast<CUstream>(stream), ordered, &s)) {
    return false;
  }
  *status = s ? cudaSuccess : record(to_cuda_error(s));
  return true;
}

cudaStream_t per_thread_if_null(cudaStream_t stream) { return stream == nullptr ? cudaStreamPerThread : stream; }

}  // namespace

}  // namespace tidepool::interpose

using tidepool::interpose::allocate;
using tidepool::interpose::release;

TIDEPOOL_HOOK cudaError_t cudaMalloc(void** ptr, std::size_t size) {
  cudaError_t status = cudaSuccess;
  if (allocate(ptr, size, nullptr, false, TIDEPOOL_CALLER(), &status)) return status;
  auto real = TIDEPOOL_NEXT(cudaMalloc);
  return real != nullptr ? real(ptr, size) : cudaErrorInsufficientDriver;
}

TIDEPOOL_HOOK cudaError_t cudaFree(void* ptr) {
  cudaError_t status = cudaSuccess;
  // cudaFree(0) initialises the context: cudart's own business.
  if (ptr != nullptr && release(ptr, nullptr, false, &status)) return status;
  auto real = TIDEPOOL_NEXT(cudaFree);
  return real != nullptr ? real(ptr) : cudaErrorInsufficientDriver;
}

TIDEPOOL_HOOK cudaError_t cudaMallocAsync(void** ptr, std::size_t size, cudaStream_t stream) {
  cudaError_t status = cudaSuccess;
  if (allocate(ptr, size, stream, true, TIDEPOOL_CALLER(), &status)) return status;
  auto real = TIDEPOOL_NEXT(cudaMallocAsync);
  return real != nullptr ? real(ptr, size, stream) : cudaErrorInsufficientDriver;
}

TIDEPOOL_HOOK cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  cudaError_t status = cudaSuccess;
  if (release(ptr, stream, true, &status)) return status;
  auto real = TIDEPOOL_NEXT(cudaFreeAsync);
  return real != nullptr ? real(ptr, stream) : cudaErrorInsufficientDriver;
}

TIDEPOOL_HOOK cudaError_t cudaMallocAsync_ptsz(void** ptr, std::size_t size, cudaStream_t stream) {
  cudaError_t status = cudaSuccess;
  if (allocate(ptr, size, tidepool::interpose::per_thread_if_null(stream), true, TIDEPOOL_CALLER(), &status))
    return status;
  auto real = TIDEPOOL_NEXT(cudaMallocAsync_ptsz);
  return real != nullptr ? real(ptr, size, stream) : cudaErrorInsufficientDriver;
}

TIDEPOOL_HOOK cudaError_t cudaFreeAsync_ptsz(void* ptr, cudaStream_t stream) {
  cudaError_t status = cudaSuccess;
  if (release(ptr, tidepool::interpose::per_thread_if_null(stream), true, &status)) return status;
  auto real = TIDEPOOL_NEXT(cudaFreeAsync_ptsz);
  return real != nullptr ? real(ptr, stream) : cudaErrorInsufficientDriver;
}

TIDEPOOL_HOOK cudaError_t cudaMallocPitch(void** ptr, std::size_t* pitch, std::size_t width, std::size_t height) {
  if (pitch != nullptr && width != 0 && height != 0) {
    const std::size_t row = tidepool::interpose::pitch_for(width);
    std::size_t bytes = 0;
    if (row < width || __builtin_mul_overflow(row, height, &bytes)) return cudaErrorInvalidValue;
    cudaError_t status = cudaSuccess;
    if (allocate(ptr, bytes, nullptr, false, TIDEPOOL_CALLER(), &status)) {
      if (status == cudaSuccess) *pitch = row;
      return status;
    }
  }
  auto real = TIDEPOOL_NEXT(cudaMallocPitch);
  return real != nullptr ? real(ptr, pitch, width, height) : cudaErrorInsufficientDriver;
}

TIDEPOOL_HOOK cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
  auto real = TIDEPOOL_NEXT(cudaMemGetInfo);
  if (real == nullptr) return cudaErrorInsufficientDriver;
  // cudart initialises the context and records any error; the figures are
  // then taken from the driver itself, since cudart may already have asked
  // our cuMemGetInfo hook.
  const cudaError_t r = real(free_bytes, total_bytes);
  if (r != cudaSuccess || free_bytes == nullptr || total_bytes == nullptr) return r;
  tidepool::runtime::Allocator* allocator = nullptr;
  if (tidepool::interpose::serving()) {
    const int device = tidepool::interpose::current_device();
    if (device >= 0) allocator = tidepool::runtime::Runtime::get().allocator(device);
  }
  auto driver_info = TIDEPOOL_REAL_DRIVER(cuMemGetInfo_v2);
  std::size_t driver_free = 0;
  std::size_t driver_total = 0;
  if (allocator == nullptr || driver_info == nullptr || driver_info(&driver_free, &driver_total) != CUDA_SUCCESS) {
    return r;
  }
  const auto seen = tidepool::runtime::visible_memory(*allocator, {driver_free, driver_total});
  *free_bytes = seen.free_bytes;
  *total_bytes = seen.total_bytes;
  return cudaSuccess;
}
