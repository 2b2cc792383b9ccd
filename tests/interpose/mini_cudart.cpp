// A stand-in for a shared libcudart, for tests: the few runtime calls the
// preload probes make, with cudart's documented semantics (lazy primary
// context, per-thread last error, size 0 gives a null pointer). It reaches
// the driver exactly as the real cudart does: dlopen("libcuda.so.1"), dlsym
// of cuGetProcAddress_v2, and every entry point through that resolver. Each
// call is counted, so a test can tell whether the program's call reached
// cudart or was served by tidepool's runtime hook in front of it.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>

extern "C" {
cudaError_t cudaMallocAsync_ptsz(void** ptr, size_t size, cudaStream_t stream);
cudaError_t cudaFreeAsync_ptsz(void* ptr, cudaStream_t stream);
__attribute__((visibility("default"))) std::uint64_t mini_cudart_calls(const char* name);
}

namespace {

struct Driver {
  decltype(&::cuInit) init = nullptr;
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) retain = nullptr;
  decltype(&::cuCtxSetCurrent) set_current = nullptr;
  decltype(&::cuMemAlloc_v2) alloc = nullptr;
  decltype(&::cuMemFree_v2) free = nullptr;
  decltype(&::cuMemAllocAsync) alloc_async = nullptr;
  decltype(&::cuMemFreeAsync) free_async = nullptr;
  decltype(&::cuMemAllocPitch_v2) alloc_pitch = nullptr;
  decltype(&::cuMemGetInfo_v2) info = nullptr;
  decltype(&::cuMemAllocHost_v2) alloc_host = nullptr;
  decltype(&::cuMemFreeHost) free_host = nullptr;
  decltype(&::cuCtxSynchronize) synchronize = nullptr;
};

thread_local cudaError_t last_error = cudaSuccess;
thread_local int current_device = 0;
std::atomic<std::uint64_t> malloc_calls{0}, free_calls{0}, malloc_async_calls{0}, free_async_calls{0}, pitch_calls{0},
    info_calls{0};

cudaError_t set_error(cudaError_t e) {
  if (e != cudaSuccess) last_error = e;
  return e;
}

cudaError_t from(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS: return cudaSuccess;
    case CUDA_ERROR_OUT_OF_MEMORY: return set_error(cudaErrorMemoryAllocation);
    case CUDA_ERROR_INVALID_VALUE: return set_error(cudaErrorInvalidValue);
    default: return set_error(cudaErrorUnknown);
  }
}

// Resolves the driver once and makes the device's primary context current.
const Driver* driver() {
  static Driver d;
  static bool ok = false;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return;
    using Resolver = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
    auto resolve = reinterpret_cast<Resolver>(::dlsym(lib, "cuGetProcAddress_v2"));
    if (resolve == nullptr) return;
    auto get = [&](const char* name, auto& field) {
      void* fn = nullptr;
      CUdriverProcAddressQueryResult found{};
      resolve(name, &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &found);
      field = reinterpret_cast<std::remove_reference_t<decltype(field)>>(fn);
    };
    get("cuInit", d.init);
    get("cuDeviceGet", d.device_get);
    get("cuDevicePrimaryCtxRetain", d.retain);
    get("cuCtxSetCurrent", d.set_current);
    get("cuMemAlloc", d.alloc);
    get("cuMemFree", d.free);
    get("cuMemAllocAsync", d.alloc_async);
    get("cuMemFreeAsync", d.free_async);
    get("cuMemAllocPitch", d.alloc_pitch);
    get("cuMemGetInfo", d.info);
    get("cuMemAllocHost", d.alloc_host);
    get("cuMemFreeHost", d.free_host);
    get("cuCtxSynchronize", d.synchronize);
    ok = d.init != nullptr && d.init(0) == CUDA_SUCCESS;
  });
  if (!ok) return nullptr;
  // Every thread's first call makes the current device's primary context current.
  thread_local bool current = false;
  if (!current) {
    CUdevice device = 0;
    CUcontext context = nullptr;
    if (d.device_get(&device, current_device) != CUDA_SUCCESS || d.retain(&context, device) != CUDA_SUCCESS ||
        d.set_current(context) != CUDA_SUCCESS) {
      return nullptr;
    }
    current = true;
  }
  return &d;
}

}  // namespace

extern "C" {

std::uint64_t mini_cudart_calls(const char* name) {
  if (std::strcmp(name, "cudaMalloc") == 0) return malloc_calls.load();
  if (std::strcmp(name, "cudaFree") == 0) return free_calls.load();
  if (std::strcmp(name, "cudaMallocAsync") == 0) return malloc_async_calls.load();
  if (std::strcmp(name, "cudaFreeAsync") == 0) return free_async_calls.load();
  if (std::strcmp(name, "cudaMallocPitch") == 0) return pitch_calls.load();
  if (std::strcmp(name, "cudaMemGetInfo") == 0) return info_calls.load();
  return 0;
}

cudaError_t cudaGetLastError() {
  const cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return last_error; }

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return set_error(cudaErrorInvalidValue);
  *device = current_device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device != 0) return set_error(cudaErrorInvalidDevice);
  current_device = device;
  return driver() != nullptr ? cudaSuccess : set_error(cudaErrorInsufficientDriver);
}

cudaError_t cudaMalloc(void** ptr, size_t size) {
  malloc_calls++;
  if (ptr == nullptr) return set_error(cudaErrorInvalidValue);
  const Driver* d = driver();
  if (d == nullptr) return set_error(cudaErrorInsufficientDriver);
  *ptr = nullptr;
  if (size == 0) return cudaSuccess;
  CUdeviceptr p = 0;
  const cudaError_t e = from(d->alloc(&p, size));
  if (e == cudaSuccess) *ptr = reinterpret_cast<void*>(p);
  return e;
}

cudaError_t cudaFree(void* ptr) {
  free_calls++;
  const Driver* d = driver();
  if (d == nullptr) return set_error(cudaErrorInsufficientDriver);
  if (ptr == nullptr) return cudaSuccess;  // initialises the context, nothing else
  return from(d->free(reinterpret_cast<CUdeviceptr>(ptr)));
}

cudaError_t cudaMallocAsync(void** ptr, size_t size, cudaStream_t stream) {
  malloc_async_calls++;
  if (ptr == nullptr) return set_error(cudaErrorInvalidValue);
  const Driver* d = driver();
  if (d == nullptr) return set_error(cudaErrorInsufficientDriver);
  CUdeviceptr p = 0;
  const cudaError_t e = from(d->alloc_async(&p, size, reinterpret_cast<CUstream>(stream)));
  if (e == cudaSuccess) *ptr = reinterpret_cast<void*>(p);
  return e;
}

cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  free_async_calls++;
  const Driver* d = driver();
  if (d == nullptr) return set_error(cudaErrorInsufficientDriver);
  return from(d->free_async(reinterpret_cast<CUdeviceptr>(ptr), reinterpret_cast<CUstream>(stream)));
}

cudaError_t cudaMallocAsync_ptsz(void** ptr, size_t size, cudaStream_t stream) {
  return cudaMallocAsync(ptr, size, stream == nullptr ? cudaStreamPerThread : stream);
}
cudaError_t cudaFreeAsync_ptsz(void* ptr, cudaStream_t stream) {
  return cudaFreeAsync(ptr, stream == nullptr ? cudaStreamPerThread : stream);
}

cudaError_t cudaMallocPitch(void** ptr, size_t* pitch, size_t width, size_t height) {
  pitch_calls++;
  if (ptr == nullptr || pitch == nullptr) return set_error(cudaErrorInvalidValue);
  const Driver* d = driver();
  if (d == nullptr) return set_error(cudaErrorInsufficientDriver);
  CUdeviceptr p = 0;
  const cudaError_t e = from(d->alloc_pitch(&p, pitch, width, height, 4));
  if (e == cudaSuccess) *ptr = reinterpret_cast<void*>(p);
  return e;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  info_calls++;
  const Driver* d = driver();
  if (d == nullptr) return set_error(cudaErrorInsufficientDriver);
  return from(d->info(free_bytes, total_bytes));
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  if (ptr == nullptr) return set_error(cudaErrorInvalidValue);
  const Driver* d = driver();
  if (d == nullptr) return set_error(cudaErrorInsufficientDriver);
  return from(d->alloc_host(ptr, size));
}

cudaError_t cudaFreeHost(void* ptr) {
  const Driver* d = driver();
  if (d == nullptr) return set_error(cudaErrorInsufficientDriver);
  return from(d->free_host(ptr));
}

cudaError_t cudaDeviceSynchronize() {
  const Driver* d = driver();
  if (d == nullptr) return set_error(cudaErrorInsufficientDriver);
  return from(d->synchronize());
}

}  // extern "C"
