// cuGetProcAddress, v1 and v2: resolving a base name ("cuMemAlloc") to the
// variant that matches the requested CUDA version and per-thread flag, as
// the real driver does. Each row: base name, the version that introduced the
// variant, whether it is the per-thread-default-stream variant, the function.
#include <cstring>

#include "sim/sim.hpp"

// The sim's own exported entry points (declared in cuda.h under macro names,
// or only for the driver's own build; sim.hpp declares the older variants).
TIDEPOOL_SIM_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr*, std::size_t, CUstream);
TIDEPOOL_SIM_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr, CUstream);
TIDEPOOL_SIM_EXPORT CUresult cuDeviceGetName(char*, int, CUdevice);
TIDEPOOL_SIM_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice, unsigned int*, int*);
TIDEPOOL_SIM_EXPORT CUresult cuStreamCreateWithPriority(CUstream*, unsigned int, int);
TIDEPOOL_SIM_EXPORT CUresult cuLaunchHostFunc(CUstream, CUhostFn, void*);

#undef cuGetProcAddress
TIDEPOOL_SIM_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags);

namespace {

struct ProcEntry {
  const char* name;
  int since;        // the CUDA version this variant belongs to
  bool per_thread;  // the _ptsz/_ptds variant
  void* fn;
};

#define TIDEPOOL_SIM_PROC(name, since, fn) \
  { name, since, false, reinterpret_cast<void*>(&fn) }
#define TIDEPOOL_SIM_PROC_PT(name, since, fn) \
  { name, since, true, reinterpret_cast<void*>(&fn) }

const ProcEntry kEntries[] = {
    TIDEPOOL_SIM_PROC("cuInit", 2000, cuInit),
    TIDEPOOL_SIM_PROC("cuDriverGetVersion", 2020, cuDriverGetVersion),
    TIDEPOOL_SIM_PROC("cuDeviceGet", 2000, cuDeviceGet),
    TIDEPOOL_SIM_PROC("cuDeviceGetCount", 2000, cuDeviceGetCount),
    TIDEPOOL_SIM_PROC("cuDeviceGetName", 2000, cuDeviceGetName),
    TIDEPOOL_SIM_PROC("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute),
    TIDEPOOL_SIM_PROC("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
    TIDEPOOL_SIM_PROC("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    TIDEPOOL_SIM_PROC("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    TIDEPOOL_SIM_PROC("cuDevicePrimaryCtxGetState", 7000, cuDevicePrimaryCtxGetState),
    TIDEPOOL_SIM_PROC("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    TIDEPOOL_SIM_PROC("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
    TIDEPOOL_SIM_PROC("cuCtxGetDevice", 2000, cuCtxGetDevice),
    TIDEPOOL_SIM_PROC("cuCtxGetDevice", 13000, cuCtxGetDevice_v2),
    TIDEPOOL_SIM_PROC("cuCtxSynchronize", 2000, cuCtxSynchronize),
    TIDEPOOL_SIM_PROC("cuCtxSynchronize", 13000, cuCtxSynchronize_v2),
    TIDEPOOL_SIM_PROC("cuCtxPushCurrent", 4000, cuCtxPushCurrent_v2),
    TIDEPOOL_SIM_PROC("cuCtxCreate", 3020, cuCtxCreate_v2),
    TIDEPOOL_SIM_PROC("cuCtxCreate", 11040, cuCtxCreate_v3),
    TIDEPOOL_SIM_PROC("cuCtxCreate", 12050, cuCtxCreate_v4),
    TIDEPOOL_SIM_PROC("cuCtxDestroy", 4000, cuCtxDestroy_v2),
    TIDEPOOL_SIM_PROC("cuCtxPopCurrent", 4000, cuCtxPopCurrent_v2),
    TIDEPOOL_SIM_PROC("cuCtxEnablePeerAccess", 4000, cuCtxEnablePeerAccess),
    TIDEPOOL_SIM_PROC("cuCtxDisablePeerAccess", 4000, cuCtxDisablePeerAccess),
    TIDEPOOL_SIM_PROC("cuDeviceCanAccessPeer", 4000, cuDeviceCanAccessPeer),
    TIDEPOOL_SIM_PROC("cuMemAlloc", 3020, cuMemAlloc_v2),
    TIDEPOOL_SIM_PROC("cuMemFree", 3020, cuMemFree_v2),
    TIDEPOOL_SIM_PROC("cuMemAllocPitch", 3020, cuMemAllocPitch_v2),
    TIDEPOOL_SIM_PROC("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    TIDEPOOL_SIM_PROC("cuMemGetAddressRange", 3020, cuMemGetAddressRange_v2),
    TIDEPOOL_SIM_PROC("cuMemAllocAsync", 11020, cuMemAllocAsync),
    TIDEPOOL_SIM_PROC_PT("cuMemAllocAsync", 11020, cuMemAllocAsync_ptsz),
    TIDEPOOL_SIM_PROC("cuMemFreeAsync", 11020, cuMemFreeAsync),
    TIDEPOOL_SIM_PROC("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync),
    TIDEPOOL_SIM_PROC("cuMemPoolCreate", 11020, cuMemPoolCreate),
    TIDEPOOL_SIM_PROC("cuMemPoolDestroy", 11020, cuMemPoolDestroy),
    TIDEPOOL_SIM_PROC("cuMemPoolSetAccess", 11020, cuMemPoolSetAccess),
    TIDEPOOL_SIM_PROC("cuDeviceGetDefaultMemPool", 11020, cuDeviceGetDefaultMemPool),
    TIDEPOOL_SIM_PROC("cuDeviceGetMemPool", 11020, cuDeviceGetMemPool),
    TIDEPOOL_SIM_PROC("cuDeviceSetMemPool", 11020, cuDeviceSetMemPool),
    TIDEPOOL_SIM_PROC_PT("cuMemFreeAsync", 11020, cuMemFreeAsync_ptsz),
    TIDEPOOL_SIM_PROC("cuMemAllocHost", 3020, cuMemAllocHost_v2),
    TIDEPOOL_SIM_PROC("cuMemHostAlloc", 2020, cuMemHostAlloc),
    TIDEPOOL_SIM_PROC("cuMemFreeHost", 2000, cuMemFreeHost),
    TIDEPOOL_SIM_PROC("cuMemHostGetDevicePointer", 3020, cuMemHostGetDevicePointer_v2),
    TIDEPOOL_SIM_PROC("cuMemAddressReserve", 10020, cuMemAddressReserve),
    TIDEPOOL_SIM_PROC("cuMemAddressFree", 10020, cuMemAddressFree),
    TIDEPOOL_SIM_PROC("cuMemCreate", 10020, cuMemCreate),
    TIDEPOOL_SIM_PROC("cuMemRelease", 10020, cuMemRelease),
    TIDEPOOL_SIM_PROC("cuMemMap", 10020, cuMemMap),
    TIDEPOOL_SIM_PROC("cuMemUnmap", 10020, cuMemUnmap),
    TIDEPOOL_SIM_PROC("cuMemSetAccess", 10020, cuMemSetAccess),
    TIDEPOOL_SIM_PROC("cuMemGetAllocationGranularity", 10020, cuMemGetAllocationGranularity),
    TIDEPOOL_SIM_PROC("cuMemExportToShareableHandle", 10020, cuMemExportToShareableHandle),
    TIDEPOOL_SIM_PROC("cuMemImportFromShareableHandle", 10020, cuMemImportFromShareableHandle),
    TIDEPOOL_SIM_PROC("cuMemGetAllocationPropertiesFromHandle", 10020, cuMemGetAllocationPropertiesFromHandle),
    TIDEPOOL_SIM_PROC("cuIpcGetMemHandle", 4010, cuIpcGetMemHandle),
    TIDEPOOL_SIM_PROC("cuIpcOpenMemHandle", 4010, cuIpcOpenMemHandle),
    TIDEPOOL_SIM_PROC("cuIpcOpenMemHandle", 11000, cuIpcOpenMemHandle_v2),
    TIDEPOOL_SIM_PROC("cuIpcCloseMemHandle", 4010, cuIpcCloseMemHandle),
    TIDEPOOL_SIM_PROC("cuIpcGetEventHandle", 4010, cuIpcGetEventHandle),
    TIDEPOOL_SIM_PROC("cuIpcOpenEventHandle", 4010, cuIpcOpenEventHandle),
    TIDEPOOL_SIM_PROC("cuStreamCreate", 2000, cuStreamCreate),
    TIDEPOOL_SIM_PROC("cuStreamCreateWithPriority", 5050, cuStreamCreateWithPriority),
    TIDEPOOL_SIM_PROC("cuStreamDestroy", 4000, cuStreamDestroy_v2),
    TIDEPOOL_SIM_PROC("cuStreamSynchronize", 2000, cuStreamSynchronize),
    TIDEPOOL_SIM_PROC("cuStreamQuery", 2000, cuStreamQuery),
    TIDEPOOL_SIM_PROC("cuStreamWaitEvent", 3020, cuStreamWaitEvent),
    TIDEPOOL_SIM_PROC("cuStreamIsCapturing", 10000, cuStreamIsCapturing),
    TIDEPOOL_SIM_PROC("cuStreamGetFlags", 5050, cuStreamGetFlags),
    TIDEPOOL_SIM_PROC("cuStreamGetCtx", 9020, cuStreamGetCtx),
    TIDEPOOL_SIM_PROC("cuStreamGetCtx", 12050, cuStreamGetCtx_v2),
    TIDEPOOL_SIM_PROC("cuStreamBeginCapture", 10000, cuStreamBeginCapture),
    TIDEPOOL_SIM_PROC("cuStreamBeginCapture", 10010, cuStreamBeginCapture_v2),
    TIDEPOOL_SIM_PROC_PT("cuStreamBeginCapture", 10000, cuStreamBeginCapture_ptsz),
    TIDEPOOL_SIM_PROC_PT("cuStreamBeginCapture", 10010, cuStreamBeginCapture_v2_ptsz),
    TIDEPOOL_SIM_PROC("cuStreamBeginCaptureToGraph", 12030, cuStreamBeginCaptureToGraph),
    TIDEPOOL_SIM_PROC_PT("cuStreamBeginCaptureToGraph", 12030, cuStreamBeginCaptureToGraph_ptsz),
    TIDEPOOL_SIM_PROC("cuStreamEndCapture", 10000, cuStreamEndCapture),
    TIDEPOOL_SIM_PROC_PT("cuStreamEndCapture", 10000, cuStreamEndCapture_ptsz),
    TIDEPOOL_SIM_PROC("cuGraphCreate", 10000, cuGraphCreate),
    TIDEPOOL_SIM_PROC("cuStreamGetCaptureInfo", 10010, cuStreamGetCaptureInfo),
    TIDEPOOL_SIM_PROC("cuStreamGetCaptureInfo", 11030, cuStreamGetCaptureInfo_v2),
    TIDEPOOL_SIM_PROC("cuStreamGetCaptureInfo", 12030, cuStreamGetCaptureInfo_v3),
    TIDEPOOL_SIM_PROC("cuThreadExchangeStreamCaptureMode", 10010, cuThreadExchangeStreamCaptureMode),
    TIDEPOOL_SIM_PROC("cuGraphDestroy", 10000, cuGraphDestroy),
    TIDEPOOL_SIM_PROC("cuGraphInstantiateWithFlags", 11040, cuGraphInstantiateWithFlags),
    TIDEPOOL_SIM_PROC("cuGraphLaunch", 10000, cuGraphLaunch),
    TIDEPOOL_SIM_PROC_PT("cuGraphLaunch", 10000, cuGraphLaunch_ptsz),
    TIDEPOOL_SIM_PROC("cuGraphExecDestroy", 10000, cuGraphExecDestroy),
    TIDEPOOL_SIM_PROC("cuGraphGetNodes", 10000, cuGraphGetNodes),
    TIDEPOOL_SIM_PROC("cuGraphNodeGetType", 10000, cuGraphNodeGetType),
    TIDEPOOL_SIM_PROC("cuGraphKernelNodeGetParams", 12000, cuGraphKernelNodeGetParams_v2),
    TIDEPOOL_SIM_PROC("cuGraphMemcpyNodeGetParams", 10000, cuGraphMemcpyNodeGetParams),
    TIDEPOOL_SIM_PROC("cuGraphMemsetNodeGetParams", 10000, cuGraphMemsetNodeGetParams),
    TIDEPOOL_SIM_PROC("cuGraphAddChildGraphNode", 10000, cuGraphAddChildGraphNode),
    TIDEPOOL_SIM_PROC("cuGraphChildGraphNodeGetGraph", 10000, cuGraphChildGraphNodeGetGraph),
    TIDEPOOL_SIM_PROC("cuLaunchHostFunc", 10000, cuLaunchHostFunc),
    TIDEPOOL_SIM_PROC("cuEventCreate", 2000, cuEventCreate),
    TIDEPOOL_SIM_PROC("cuEventDestroy", 4000, cuEventDestroy_v2),
    TIDEPOOL_SIM_PROC("cuEventRecord", 2000, cuEventRecord),
    TIDEPOOL_SIM_PROC("cuEventQuery", 2000, cuEventQuery),
    TIDEPOOL_SIM_PROC("cuEventSynchronize", 2000, cuEventSynchronize),
    TIDEPOOL_SIM_PROC("cuEventElapsedTime", 2000, cuEventElapsedTime),
    TIDEPOOL_SIM_PROC("cuEventElapsedTime", 12080, cuEventElapsedTime_v2),
    TIDEPOOL_SIM_PROC("cuMemcpy", 4000, cuMemcpy),
    TIDEPOOL_SIM_PROC("cuMemcpyAsync", 4000, cuMemcpyAsync),
    TIDEPOOL_SIM_PROC("cuMemcpyHtoD", 3020, cuMemcpyHtoD_v2),
    TIDEPOOL_SIM_PROC("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2),
    TIDEPOOL_SIM_PROC("cuMemcpyDtoD", 3020, cuMemcpyDtoD_v2),
    TIDEPOOL_SIM_PROC("cuMemcpyHtoDAsync", 3020, cuMemcpyHtoDAsync_v2),
    TIDEPOOL_SIM_PROC("cuMemcpyDtoHAsync", 3020, cuMemcpyDtoHAsync_v2),
    TIDEPOOL_SIM_PROC("cuMemcpyDtoDAsync", 3020, cuMemcpyDtoDAsync_v2),
    TIDEPOOL_SIM_PROC("cuMemsetD8", 3020, cuMemsetD8_v2),
    TIDEPOOL_SIM_PROC("cuMemsetD8Async", 3020, cuMemsetD8Async),
    TIDEPOOL_SIM_PROC("cuPointerGetAttribute", 4000, cuPointerGetAttribute),
    TIDEPOOL_SIM_PROC("cuPointerGetAttributes", 7000, cuPointerGetAttributes),
    TIDEPOOL_SIM_PROC("cuFuncGetParamInfo", 12040, cuFuncGetParamInfo),
    TIDEPOOL_SIM_PROC("cuKernelGetParamInfo", 12040, cuKernelGetParamInfo),
    TIDEPOOL_SIM_PROC("cuModuleLoadData", 2000, cuModuleLoadData),
    TIDEPOOL_SIM_PROC("cuModuleGetFunction", 2000, cuModuleGetFunction),
    TIDEPOOL_SIM_PROC("cuModuleUnload", 2000, cuModuleUnload),
    TIDEPOOL_SIM_PROC("cuLaunchKernel", 4000, cuLaunchKernel),
    TIDEPOOL_SIM_PROC_PT("cuLaunchKernel", 7000, cuLaunchKernel_ptsz),
    TIDEPOOL_SIM_PROC("cuLaunchKernelEx", 11060, cuLaunchKernelEx),
    TIDEPOOL_SIM_PROC_PT("cuLaunchKernelEx", 11060, cuLaunchKernelEx_ptsz),
    // The v2 stream memory operations; the v1 ABI (CUDA 8.0/9.0) is not simulated.
    TIDEPOOL_SIM_PROC("cuStreamWriteValue32", 8000, tidepool_sim_cuStreamWriteValue32_v1),
    TIDEPOOL_SIM_PROC_PT("cuStreamWriteValue32", 8000, tidepool_sim_cuStreamWriteValue32_v1_ptsz),
    TIDEPOOL_SIM_PROC("cuStreamWriteValue64", 8000, tidepool_sim_cuStreamWriteValue64_v1),
    TIDEPOOL_SIM_PROC_PT("cuStreamWriteValue64", 8000, tidepool_sim_cuStreamWriteValue64_v1_ptsz),
    TIDEPOOL_SIM_PROC("cuStreamWaitValue32", 8000, tidepool_sim_cuStreamWaitValue32_v1),
    TIDEPOOL_SIM_PROC_PT("cuStreamWaitValue32", 8000, tidepool_sim_cuStreamWaitValue32_v1_ptsz),
    TIDEPOOL_SIM_PROC("cuStreamWaitValue64", 8000, tidepool_sim_cuStreamWaitValue64_v1),
    TIDEPOOL_SIM_PROC_PT("cuStreamWaitValue64", 8000, tidepool_sim_cuStreamWaitValue64_v1_ptsz),
    TIDEPOOL_SIM_PROC("cuStreamBatchMemOp", 8000, tidepool_sim_cuStreamBatchMemOp_v1),
    TIDEPOOL_SIM_PROC_PT("cuStreamBatchMemOp", 8000, tidepool_sim_cuStreamBatchMemOp_v1_ptsz),
    TIDEPOOL_SIM_PROC("cuStreamWaitValue32", 11070, cuStreamWaitValue32_v2),
    TIDEPOOL_SIM_PROC_PT("cuStreamWaitValue32", 11070, cuStreamWaitValue32_v2_ptsz),
    TIDEPOOL_SIM_PROC("cuStreamWaitValue64", 11070, cuStreamWaitValue64_v2),
    TIDEPOOL_SIM_PROC_PT("cuStreamWaitValue64", 11070, cuStreamWaitValue64_v2_ptsz),
    TIDEPOOL_SIM_PROC("cuStreamWriteValue32", 11070, cuStreamWriteValue32_v2),
    TIDEPOOL_SIM_PROC_PT("cuStreamWriteValue32", 11070, cuStreamWriteValue32_v2_ptsz),
    TIDEPOOL_SIM_PROC("cuStreamWriteValue64", 11070, cuStreamWriteValue64_v2),
    TIDEPOOL_SIM_PROC_PT("cuStreamWriteValue64", 11070, cuStreamWriteValue64_v2_ptsz),
    TIDEPOOL_SIM_PROC("cuStreamBatchMemOp", 11070, cuStreamBatchMemOp_v2),
    TIDEPOOL_SIM_PROC_PT("cuStreamBatchMemOp", 11070, cuStreamBatchMemOp_v2_ptsz),
    TIDEPOOL_SIM_PROC("cuMemcpyBatchAsync", 12080, tidepool_sim_cuMemcpyBatchAsync_v1),
    TIDEPOOL_SIM_PROC_PT("cuMemcpyBatchAsync", 12080, tidepool_sim_cuMemcpyBatchAsync_v1_ptsz),
    TIDEPOOL_SIM_PROC("cuMemcpyBatchAsync", 13000, cuMemcpyBatchAsync_v2),
    TIDEPOOL_SIM_PROC_PT("cuMemcpyBatchAsync", 13000, cuMemcpyBatchAsync_v2_ptsz),
    TIDEPOOL_SIM_PROC("cuMemcpy3DBatchAsync", 12080, tidepool_sim_cuMemcpy3DBatchAsync_v1),
    TIDEPOOL_SIM_PROC_PT("cuMemcpy3DBatchAsync", 12080, tidepool_sim_cuMemcpy3DBatchAsync_v1_ptsz),
    TIDEPOOL_SIM_PROC("cuMemcpy3DBatchAsync", 13000, cuMemcpy3DBatchAsync_v2),
    TIDEPOOL_SIM_PROC_PT("cuMemcpy3DBatchAsync", 13000, cuMemcpy3DBatchAsync_v2_ptsz),
    TIDEPOOL_SIM_PROC("cuArrayCreate", 3020, cuArrayCreate_v2),
    TIDEPOOL_SIM_PROC("cuArrayDestroy", 2000, cuArrayDestroy),
    TIDEPOOL_SIM_PROC("cuArrayGetDescriptor", 3020, cuArrayGetDescriptor_v2),
    TIDEPOOL_SIM_PROC("cuMemcpyDtoA", 3020, cuMemcpyDtoA_v2),
    TIDEPOOL_SIM_PROC("cuMemcpyAtoD", 3020, cuMemcpyAtoD_v2),
    TIDEPOOL_SIM_PROC("cuMemcpyHtoA", 3020, cuMemcpyHtoA_v2),
    TIDEPOOL_SIM_PROC("cuMemcpyAtoH", 3020, cuMemcpyAtoH_v2),
    TIDEPOOL_SIM_PROC("cuGetErrorName", 6000, cuGetErrorName),
    TIDEPOOL_SIM_PROC("cuGetErrorString", 6000, cuGetErrorString),
    TIDEPOOL_SIM_PROC("cuGetProcAddress", 12000, cuGetProcAddress_v2),
    TIDEPOOL_SIM_PROC("cuGetProcAddress", 11030, cuGetProcAddress),
};

CUresult resolve(const char* symbol, void** pfn, int version, cuuint64_t flags,
                 CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  const ProcEntry* best = nullptr;
  bool known = false;
  for (const ProcEntry& e : kEntries) {
    if (std::strcmp(e.name, symbol) != 0) continue;
    known = true;
    if (e.since > version) continue;
    // Prefer the newest variant the caller's version allows, and the
    // per-thread variant when asked for and it exists.
    const bool better = best == nullptr || e.since > best->since ||
                        (e.since == best->since && e.per_thread == per_thread && best->per_thread != per_thread);
    if (better && (!e.per_thread || per_thread)) best = &e;
  }
  if (best == nullptr) {
    if (status != nullptr) {
      *status = known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    }
    return CUDA_ERROR_NOT_FOUND;
  }
  *pfn = best->fn;
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

}  // namespace

TIDEPOOL_SIM_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                                 CUdriverProcAddressQueryResult* status) {
  if (CUresult r = tidepool::sim::enter("cuGetProcAddress_v2"); r != CUDA_SUCCESS) return r;
  return resolve(symbol, pfn, version, flags, status);
}

TIDEPOOL_SIM_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  if (CUresult r = tidepool::sim::enter("cuGetProcAddress"); r != CUDA_SUCCESS) return r;
  return resolve(symbol, pfn, version, flags, nullptr);
}
