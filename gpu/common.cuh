// gpu/: helpers shared by the bundle's CUDA programs: error checks, a fill
// kernel, a slow fill kernel (spins first, so it still writes after the host
// moved on), and a host-side byte check. Each program prints one result line
// that must read the same with and without the preload (no addresses).
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(call)                                                                                              \
  do {                                                                                                           \
    cudaError_t err_ = (call);                                                                                   \
    if (err_ != cudaSuccess) {                                                                                   \
      std::printf("%s: FAILED %s at %s:%d: %s\n", PROGRAM, #call, __FILE__, __LINE__, cudaGetErrorString(err_)); \
      std::exit(1);                                                                                              \
    }                                                                                                            \
  } while (0)

__global__ void fill_kernel(unsigned char* data, size_t n, unsigned char value) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    data[i] = value;
}

// Spins for about `cycles` clock ticks, then fills: work that is still
// running, and will still write, well after the host returns.
__global__ void slow_fill_kernel(unsigned char* data, size_t n, unsigned char value, long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    data[i] = value;
}

__global__ void add_kernel(unsigned char* data, size_t n, unsigned char delta) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    data[i] = static_cast<unsigned char>(data[i] + delta);
}

// Bytes of device buffer `data` (n bytes) that are not `value`.
inline size_t count_wrong(const void* data, size_t n, unsigned char value) {
  std::vector<unsigned char> host(n);
  if (cudaMemcpy(host.data(), data, n, cudaMemcpyDeviceToHost) != cudaSuccess) return n;
  size_t wrong = 0;
  for (unsigned char b : host) wrong += b != value;
  return wrong;
}

// A driver-API call that must succeed: on failure, one line naming it and
// `return 1` from the calling main (programs that use the driver API).
#ifdef CUDA_VERSION
#define DRV(call)                                                                        \
  do {                                                                                   \
    CUresult r_ = (call);                                                                \
    if (r_ != CUDA_SUCCESS) {                                                            \
      std::printf("%s: FAILED %s = %d at line %d\n", PROGRAM, #call, int(r_), __LINE__); \
      return 1;                                                                          \
    }                                                                                    \
  } while (0)
#endif
