// The hooked entry points, as libtidepool.so exports them, and the lookups
// that substitute them for the real ones (dlsym, cuGetProcAddress).
//
// Every driver hook is one row of the list below; the lookup by name (dlsym)
// and by real address (cuGetProcAddress) follow from these rows. The runtime
// API hooks (cudart_hooks.cpp: cudaMalloc and the rest of the CUDA runtime
// API, not tidepool's runtime/) are reached only as exported symbols.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstddef>

#define TIDEPOOL_HOOK extern "C" __attribute__((visibility("default")))

// Variants cuda.h and cuda_runtime_api.h declare only under the per-thread
// default-stream macros; the libraries export them regardless.
extern "C" {
CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, std::size_t bytesize, CUstream stream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream);
cudaError_t cudaMallocAsync_ptsz(void** ptr, std::size_t size, cudaStream_t stream);
cudaError_t cudaFreeAsync_ptsz(void* ptr, cudaStream_t stream);
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                             unsigned bz, unsigned shared, CUstream stream, void** params, void** extra);
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params, void** extra);
// The destroy of CUDA before 4.0, which cuda.h renames away; drivers still
// export it and cuGetProcAddress hands it out for old versions.
CUresult tidepool_cuStreamDestroy_v1(CUstream stream) __asm__("cuStreamDestroy");
// The 4-argument resolver of CUDA 11.3 to 11.8, which cuda.h renames away.
CUresult tidepool_cuGetProcAddress_v1(const char* symbol, void** pfn, int version,
                                      cuuint64_t flags) __asm__("cuGetProcAddress");
}

// Driver entry points whose real address cuGetProcAddress may hand out.
// clang-format off
#define TIDEPOOL_DRIVER_HOOKS(X)                                             \
  X(cuMemAlloc_v2) X(cuMemFree_v2) X(cuMemAllocAsync) X(cuMemFreeAsync)      \
  X(cuMemAllocAsync_ptsz) X(cuMemFreeAsync_ptsz) X(cuMemAllocPitch_v2)       \
  X(cuMemGetInfo_v2) X(cuMemGetAddressRange_v2) X(cuPointerGetAttribute)     \
  X(cuPointerGetAttributes) X(cuStreamCreate) X(cuStreamCreateWithPriority)  \
  X(cuGreenCtxStreamCreate) X(cuStreamDestroy_v2) X(cuLaunchKernel)         \
  X(cuLaunchKernel_ptsz) X(cuLaunchKernelEx) X(cuLaunchKernelEx_ptsz)
// clang-format on

namespace tidepool::interpose {

// Our hook for the driver symbol `name` (e.g. "cuMemAlloc_v2",
// "cuGetProcAddress_v2"), or null when tidepool does not hook it. Runtime API
// names are not substituted this way: a privately opened cudart reaches the
// driver through cuGetProcAddress, where the driver hooks catch it.
void* hook_for_driver_symbol(const char* name);
// Our hook for a function pointer the real driver handed out, when it is one
// of the hooked entry points; null otherwise.
void* hook_for_real_address(const void* real);

}  // namespace tidepool::interpose
