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
#include <cstdint>

#define TIDEPOOL_HOOK extern "C" __attribute__((visibility("default")))
// In a hook's own body: where the program's call will return to, which names
// who asked (runtime/call_sites.hpp). One register read, no unwinding.
#define TIDEPOOL_CALLER() reinterpret_cast<std::uintptr_t>(__builtin_return_address(0))

// Variants cuda.h and cuda_runtime_api.h declare only under the per-thread
// default-stream macros; the libraries export them regardless.
extern "C" {
CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, std::size_t bytesize, CUstream stream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, std::size_t bytesize, CUmemoryPool pool, CUstream stream);
cudaError_t cudaMallocAsync_ptsz(void** ptr, std::size_t size, cudaStream_t stream);
cudaError_t cudaFreeAsync_ptsz(void* ptr, cudaStream_t stream);
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                             unsigned shared, CUstream stream, void** params, void** extra);
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params, void** extra);
CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream);
CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                        unsigned bz, unsigned shared, CUstream stream, void** params);
CUresult cuMemcpy3DPeer_ptds(const CUDA_MEMCPY3D_PEER* d);
CUresult cuStreamWriteValue32_v2_ptsz(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags);
CUresult cuStreamWriteValue64_v2_ptsz(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags);
CUresult cuStreamWaitValue32_v2_ptsz(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags);
CUresult cuStreamWaitValue64_v2_ptsz(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags);
CUresult cuMemcpy3DPeerAsync_ptsz(const CUDA_MEMCPY3D_PEER* d, CUstream s);
CUresult cuStreamBeginCapture_v2_ptsz(CUstream stream, CUstreamCaptureMode mode);
CUresult cuStreamEndCapture_ptsz(CUstream stream, CUgraph* graph);
CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream stream, CUgraph graph, const CUgraphNode* dependencies,
                                          const CUgraphEdgeData* edges, std::size_t count, CUstreamCaptureMode mode);
CUresult cuCtxCreate_v2(CUcontext* context, unsigned int flags, CUdevice device);
CUresult cuCtxCreate_v3(CUcontext* context, CUexecAffinityParam* affinity, int count, unsigned int flags,
                        CUdevice device);
CUresult cuStreamBatchMemOp_v2_ptsz(CUstream stream, unsigned int count, CUstreamBatchMemOpParams* ops,
                                    unsigned int flags);
CUresult cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr* dsts, CUdeviceptr* srcs, std::size_t* sizes, std::size_t count,
                                    CUmemcpyAttributes* attrs, std::size_t* attrs_idxs, std::size_t num_attrs,
                                    CUstream s);
// cuMemcpyBatchAsync of CUDA 12.8 and 12.9 (with failIdx), which cuda.h
// renames to the _v2 (batch_hooks.cpp).
CUresult tidepool_cuMemcpyBatchAsync_v1(CUdeviceptr* dsts, CUdeviceptr* srcs, std::size_t* sizes, std::size_t count,
                                        CUmemcpyAttributes* attrs, std::size_t* attrs_idxs, std::size_t num_attrs,
                                        std::size_t* fail_idx, CUstream s) __asm__("cuMemcpyBatchAsync");
CUresult tidepool_cuMemcpyBatchAsync_v1_ptsz(CUdeviceptr* dsts, CUdeviceptr* srcs, std::size_t* sizes,
                                             std::size_t count, CUmemcpyAttributes* attrs, std::size_t* attrs_idxs,
                                             std::size_t num_attrs, std::size_t* fail_idx,
                                             CUstream s) __asm__("cuMemcpyBatchAsync_ptsz");
// cuMemcpy3DBatchAsync: 13.0's per-thread form, and 12.8's (with failIdx),
// which cuda.h renames to the _v2.
CUresult cuMemcpy3DBatchAsync_v2_ptsz(std::size_t count, CUDA_MEMCPY3D_BATCH_OP* ops, unsigned long long flags,
                                      CUstream s);
CUresult tidepool_cuMemcpy3DBatchAsync_v1(std::size_t count, CUDA_MEMCPY3D_BATCH_OP* ops, std::size_t* fail_idx,
                                          unsigned long long flags, CUstream s) __asm__("cuMemcpy3DBatchAsync");
CUresult tidepool_cuMemcpy3DBatchAsync_v1_ptsz(std::size_t count, CUDA_MEMCPY3D_BATCH_OP* ops, std::size_t* fail_idx,
                                               unsigned long long flags,
                                               CUstream s) __asm__("cuMemcpy3DBatchAsync_ptsz");
// Graph entry points of CUDA 11 that cuda.h renames away; drivers still
// export them, and cudart 11.x asks for them.
CUresult tidepool_cuGraphInstantiate_v2(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node, char* log,
                                        std::size_t log_size) __asm__("cuGraphInstantiate_v2");
CUresult tidepool_cuGraphExecUpdate_v1(CUgraphExec exec, CUgraph graph, CUgraphNode* error_node,
                                       CUgraphExecUpdateResult* result) __asm__("cuGraphExecUpdate");
CUresult tidepool_cuGraphExecKernelNodeSetParams_v1(
    CUgraphExec exec, CUgraphNode node,
    const CUDA_KERNEL_NODE_PARAMS_v1* params) __asm__("cuGraphExecKernelNodeSetParams");
// The per-thread-stream copies and sets (copy_hooks.cpp).
CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, std::size_t n);
CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, std::size_t n, CUstream s);
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, std::size_t n);
CUresult cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr src, std::size_t n);
CUresult cuMemcpyDtoA_v2_ptds(CUarray dst, std::size_t dst_offset, CUdeviceptr src, std::size_t n);
CUresult cuMemcpyAtoD_v2_ptds(CUdeviceptr dst, CUarray src, std::size_t src_offset, std::size_t n);
CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, std::size_t n);
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void* src, std::size_t n, CUstream s);
CUresult cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr src, std::size_t n, CUstream s);
CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, std::size_t n, CUstream s);
CUresult cuMemcpyPeer_ptds(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, std::size_t n);
CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, std::size_t n,
                                CUstream s);
CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D* d);
CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D* d);
CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D* d, CUstream s);
CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D* d);
CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D* d, CUstream s);
CUresult cuMemsetD8_v2_ptds(CUdeviceptr dst, unsigned char v, std::size_t n);
CUresult cuMemsetD8Async_ptsz(CUdeviceptr dst, unsigned char v, std::size_t n, CUstream s);
CUresult cuMemsetD2D8_v2_ptds(CUdeviceptr dst, std::size_t pitch, unsigned char v, std::size_t w, std::size_t h);
CUresult cuMemsetD2D8Async_ptsz(CUdeviceptr dst, std::size_t pitch, unsigned char v, std::size_t w, std::size_t h,
                                CUstream s);
CUresult cuMemsetD16_v2_ptds(CUdeviceptr dst, unsigned short v, std::size_t n);
CUresult cuMemsetD16Async_ptsz(CUdeviceptr dst, unsigned short v, std::size_t n, CUstream s);
CUresult cuMemsetD2D16_v2_ptds(CUdeviceptr dst, std::size_t pitch, unsigned short v, std::size_t w, std::size_t h);
CUresult cuMemsetD2D16Async_ptsz(CUdeviceptr dst, std::size_t pitch, unsigned short v, std::size_t w, std::size_t h,
                                 CUstream s);
CUresult cuMemsetD32_v2_ptds(CUdeviceptr dst, unsigned int v, std::size_t n);
CUresult cuMemsetD32Async_ptsz(CUdeviceptr dst, unsigned int v, std::size_t n, CUstream s);
CUresult cuMemsetD2D32_v2_ptds(CUdeviceptr dst, std::size_t pitch, unsigned int v, std::size_t w, std::size_t h);
CUresult cuMemsetD2D32Async_ptsz(CUdeviceptr dst, std::size_t pitch, unsigned int v, std::size_t w, std::size_t h,
                                 CUstream s);
// The destroy of CUDA before 4.0, which cuda.h renames away; drivers still
// export it and cuGetProcAddress hands it out for old versions.
CUresult tidepool_cuStreamDestroy_v1(CUstream stream) __asm__("cuStreamDestroy");
// Stream capture's begin in CUDA 10.0's form, without a mode, which cuda.h
// renames to its _v2.
CUresult tidepool_cuStreamBeginCapture_v1(CUstream stream) __asm__("cuStreamBeginCapture");
CUresult tidepool_cuStreamBeginCapture_v1_ptsz(CUstream stream) __asm__("cuStreamBeginCapture_ptsz");
// The stream memory operations of CUDA before 11.7, which cuda.h renames to
// their _v2; drivers still export them for programs built then.
CUresult tidepool_cuStreamWriteValue32_v1(CUstream s, CUdeviceptr addr, cuuint32_t value,
                                          unsigned int flags) __asm__("cuStreamWriteValue32");
CUresult tidepool_cuStreamWriteValue32_v1_ptsz(CUstream s, CUdeviceptr addr, cuuint32_t value,
                                               unsigned int flags) __asm__("cuStreamWriteValue32_ptsz");
CUresult tidepool_cuStreamWriteValue64_v1(CUstream s, CUdeviceptr addr, cuuint64_t value,
                                          unsigned int flags) __asm__("cuStreamWriteValue64");
CUresult tidepool_cuStreamWriteValue64_v1_ptsz(CUstream s, CUdeviceptr addr, cuuint64_t value,
                                               unsigned int flags) __asm__("cuStreamWriteValue64_ptsz");
CUresult tidepool_cuStreamWaitValue32_v1(CUstream s, CUdeviceptr addr, cuuint32_t value,
                                         unsigned int flags) __asm__("cuStreamWaitValue32");
CUresult tidepool_cuStreamWaitValue32_v1_ptsz(CUstream s, CUdeviceptr addr, cuuint32_t value,
                                              unsigned int flags) __asm__("cuStreamWaitValue32_ptsz");
CUresult tidepool_cuStreamWaitValue64_v1(CUstream s, CUdeviceptr addr, cuuint64_t value,
                                         unsigned int flags) __asm__("cuStreamWaitValue64");
CUresult tidepool_cuStreamWaitValue64_v1_ptsz(CUstream s, CUdeviceptr addr, cuuint64_t value,
                                              unsigned int flags) __asm__("cuStreamWaitValue64_ptsz");
CUresult tidepool_cuStreamBatchMemOp_v1(CUstream s, unsigned int count, CUstreamBatchMemOpParams* ops,
                                        unsigned int flags) __asm__("cuStreamBatchMemOp");
CUresult tidepool_cuStreamBatchMemOp_v1_ptsz(CUstream s, unsigned int count, CUstreamBatchMemOpParams* ops,
                                             unsigned int flags) __asm__("cuStreamBatchMemOp_ptsz");
// The IPC open of CUDA before 11.0, which cuda.h renames to its _v2.
CUresult tidepool_cuIpcOpenMemHandle_v1(CUdeviceptr* dptr, CUipcMemHandle handle,
                                        unsigned int flags) __asm__("cuIpcOpenMemHandle");
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
  X(cuLaunchKernel_ptsz) X(cuLaunchKernelEx) X(cuLaunchKernelEx_ptsz)      \
  X(cuGraphInstantiateWithFlags) X(cuGraphInstantiateWithParams)            \
  X(cuGraphLaunch) X(cuGraphLaunch_ptsz) X(cuGraphExecDestroy)              \
  X(cuGraphExecUpdate_v2) X(cuGraphExecKernelNodeSetParams_v2)              \
  X(cuGraphExecMemcpyNodeSetParams) X(cuGraphExecMemsetNodeSetParams)      \
  X(cuGraphExecChildGraphNodeSetParams) X(cuGraphExecNodeSetParams)         \
  X(cuLaunchCooperativeKernel) X(cuLaunchCooperativeKernel_ptsz)            \
  X(cuMemcpy3DPeer) X(cuMemcpy3DPeer_ptds) X(cuMemcpy3DPeerAsync)           \
  X(cuMemcpy3DPeerAsync_ptsz)                                               \
  X(cuMemcpy) X(cuMemcpy_ptds) X(cuMemcpyAsync) X(cuMemcpyAsync_ptsz) \
  X(cuMemcpyHtoD_v2) X(cuMemcpyHtoD_v2_ptds) X(cuMemcpyDtoH_v2) \
  X(cuMemcpyDtoH_v2_ptds) X(cuMemcpyDtoD_v2) X(cuMemcpyDtoD_v2_ptds) \
  X(cuMemcpyHtoDAsync_v2) X(cuMemcpyHtoDAsync_v2_ptsz) \
  X(cuMemcpyDtoHAsync_v2) X(cuMemcpyDtoHAsync_v2_ptsz) \
  X(cuMemcpyDtoDAsync_v2) X(cuMemcpyDtoDAsync_v2_ptsz) X(cuMemcpyPeer) \
  X(cuMemcpyPeer_ptds) X(cuMemcpyPeerAsync) X(cuMemcpyPeerAsync_ptsz) \
  X(cuMemcpy2D_v2) X(cuMemcpy2D_v2_ptds) X(cuMemcpy2DUnaligned_v2) \
  X(cuMemcpy2DUnaligned_v2_ptds) X(cuMemcpy2DAsync_v2) \
  X(cuMemcpy2DAsync_v2_ptsz) X(cuMemcpy3D_v2) X(cuMemcpy3D_v2_ptds) \
  X(cuMemcpy3DAsync_v2) X(cuMemcpy3DAsync_v2_ptsz) X(cuMemsetD8_v2) \
  X(cuMemsetD8_v2_ptds) X(cuMemsetD8Async) X(cuMemsetD8Async_ptsz) \
  X(cuMemsetD2D8_v2) X(cuMemsetD2D8_v2_ptds) X(cuMemsetD2D8Async) \
  X(cuMemsetD2D8Async_ptsz) X(cuMemsetD16_v2) X(cuMemsetD16_v2_ptds) \
  X(cuMemsetD16Async) X(cuMemsetD16Async_ptsz) X(cuMemsetD2D16_v2) \
  X(cuMemsetD2D16_v2_ptds) X(cuMemsetD2D16Async) X(cuMemsetD2D16Async_ptsz) \
  X(cuMemsetD32_v2) X(cuMemsetD32_v2_ptds) X(cuMemsetD32Async) \
  X(cuMemsetD32Async_ptsz) X(cuMemsetD2D32_v2) X(cuMemsetD2D32_v2_ptds) \
  X(cuMemsetD2D32Async) X(cuMemsetD2D32Async_ptsz) X(cuCtxEnablePeerAccess) \
  X(cuCtxDisablePeerAccess) X(cuDeviceSetMemPool) X(cuMemPoolDestroy) \
  X(cuMemCreate) X(cuMemRelease) X(cuMemMap) X(cuMemUnmap) \
  X(cuMemPoolSetAccess) X(cuIpcGetMemHandle) X(cuIpcOpenMemHandle_v2) \
  X(cuIpcCloseMemHandle) X(cuMemAllocFromPoolAsync) X(cuMemAllocFromPoolAsync_ptsz) \
  X(cuStreamWriteValue32_v2) X(cuStreamWriteValue32_v2_ptsz) X(cuStreamWriteValue64_v2) \
  X(cuStreamWriteValue64_v2_ptsz) X(cuStreamWaitValue32_v2) X(cuStreamWaitValue32_v2_ptsz) \
  X(cuStreamWaitValue64_v2) X(cuStreamWaitValue64_v2_ptsz) X(cuStreamBatchMemOp_v2) X(cuStreamBatchMemOp_v2_ptsz) \
  X(cuMemcpyBatchAsync_v2) X(cuMemcpyBatchAsync_v2_ptsz) X(cuCtxSetCurrent) X(cuCtxPushCurrent_v2) \
  X(cuMemcpy3DBatchAsync_v2) X(cuMemcpy3DBatchAsync_v2_ptsz) X(cuMemcpyDtoA_v2) X(cuMemcpyDtoA_v2_ptds) \
  X(cuMemcpyAtoD_v2) X(cuMemcpyAtoD_v2_ptds) \
  X(cuCtxCreate_v2) X(cuCtxCreate_v3) X(cuCtxCreate_v4) X(cuStreamBeginCapture_v2) \
  X(cuStreamBeginCapture_v2_ptsz) X(cuStreamBeginCaptureToGraph) X(cuStreamBeginCaptureToGraph_ptsz) \
  X(cuStreamEndCapture) X(cuStreamEndCapture_ptsz)
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
// The program resolved driver symbol `name` (cuGetProcAddress, dlsym), and
// got our hook (`hooked`) or the driver's own: a begin-capture entry point
// the hooks do not stand in for makes a capture possible for good.
void capture_entry_resolved(const char* name, bool hooked);

}  // namespace tidepool::interpose
