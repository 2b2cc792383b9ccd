// The table of CUDA driver entry points tidepool calls, as one X-macro.
//
// Each row is X(field, "name as cuGetProcAddress knows it", exported_symbol,
// abi_version). The exported symbol is the versioned ABI name (cuMemAlloc_v2,
// ...) and gives the field its type; the plain name is what cuGetProcAddress
// resolves, and it hands out the newest variant at or below the version asked
// for. So each row asks at its own abi_version, the CUDA version of the
// variant whose type we call (cudaTypedefs.h's PFN_<name>_v<version>), never
// at the driver's: CUDA 13.0 gave cuCtxGetDevice and cuCtxSynchronize a
// context parameter, and a one-argument call through the 13.0 variant reads a
// garbage context and crashes inside the driver. Adding an entry point is one
// row here. cuStreamGetCtx asks for its 12.5 form (with a green context
// out-parameter); older drivers hand out the two-argument form, which ignores
// the third argument under the platform ABI.
#pragma once

#include <cuda.h>

// clang-format off
#define TIDEPOOL_DRIVER_ENTRY_POINTS(X)                                                                       \
  X(init,                        "cuInit",                       cuInit,                         2000)        \
  X(driverGetVersion,            "cuDriverGetVersion",           cuDriverGetVersion,             2020)        \
  X(deviceGet,                   "cuDeviceGet",                  cuDeviceGet,                    2000)        \
  X(deviceGetCount,              "cuDeviceGetCount",             cuDeviceGetCount,               2000)        \
  X(deviceGetAttribute,          "cuDeviceGetAttribute",         cuDeviceGetAttribute,           2000)        \
  X(deviceTotalMem,              "cuDeviceTotalMem",             cuDeviceTotalMem_v2,            3020)        \
  X(devicePrimaryCtxRetain,      "cuDevicePrimaryCtxRetain",     cuDevicePrimaryCtxRetain,       7000)        \
  X(devicePrimaryCtxRelease,     "cuDevicePrimaryCtxRelease",    cuDevicePrimaryCtxRelease_v2,  11000)        \
  X(ctxGetCurrent,               "cuCtxGetCurrent",              cuCtxGetCurrent,                4000)        \
  X(ctxSetCurrent,               "cuCtxSetCurrent",              cuCtxSetCurrent,                4000)        \
  X(ctxGetDevice,                "cuCtxGetDevice",               cuCtxGetDevice,                 2000)        \
  X(ctxSynchronize,              "cuCtxSynchronize",             cuCtxSynchronize,               2000)        \
  X(ctxPushCurrent,              "cuCtxPushCurrent",             cuCtxPushCurrent_v2,            4000)        \
  X(ctxPopCurrent,               "cuCtxPopCurrent",              cuCtxPopCurrent_v2,             4000)        \
  X(memAlloc,                    "cuMemAlloc",                   cuMemAlloc_v2,                  3020)        \
  X(memFree,                     "cuMemFree",                    cuMemFree_v2,                   3020)        \
  X(memAllocPitch,               "cuMemAllocPitch",              cuMemAllocPitch_v2,             3020)        \
  X(memGetInfo,                  "cuMemGetInfo",                 cuMemGetInfo_v2,                3020)        \
  X(memGetAddressRange,          "cuMemGetAddressRange",         cuMemGetAddressRange_v2,        3020)        \
  X(memAllocAsync,               "cuMemAllocAsync",              cuMemAllocAsync,               11020)        \
  X(memFreeAsync,                "cuMemFreeAsync",               cuMemFreeAsync,                11020)        \
  X(deviceGetMemPool,            "cuDeviceGetMemPool",           cuDeviceGetMemPool,            11020)        \
  X(deviceGetDefaultMemPool,     "cuDeviceGetDefaultMemPool",    cuDeviceGetDefaultMemPool,     11020)        \
  X(memAllocHost,                "cuMemAllocHost",               cuMemAllocHost_v2,              3020)        \
  X(memHostAlloc,                "cuMemHostAlloc",               cuMemHostAlloc,                 2020)        \
  X(memFreeHost,                 "cuMemFreeHost",                cuMemFreeHost,                  2000)        \
  X(memAddressReserve,           "cuMemAddressReserve",          cuMemAddressReserve,           10020)        \
  X(memAddressFree,              "cuMemAddressFree",             cuMemAddressFree,              10020)        \
  X(memCreate,                   "cuMemCreate",                  cuMemCreate,                   10020)        \
  X(memRelease,                  "cuMemRelease",                 cuMemRelease,                  10020)        \
  X(memMap,                      "cuMemMap",                     cuMemMap,                      10020)        \
  X(memUnmap,                    "cuMemUnmap",                   cuMemUnmap,                    10020)        \
  X(memSetAccess,                "cuMemSetAccess",               cuMemSetAccess,                10020)        \
  X(memGetAllocationGranularity, "cuMemGetAllocationGranularity", cuMemGetAllocationGranularity, 10020)       \
  X(memExportToShareableHandle,  "cuMemExportToShareableHandle", cuMemExportToShareableHandle,  10020)        \
  X(memImportFromShareableHandle, "cuMemImportFromShareableHandle", cuMemImportFromShareableHandle, 10020)    \
  X(ipcGetMemHandle,             "cuIpcGetMemHandle",            cuIpcGetMemHandle,              4010)        \
  X(ipcOpenMemHandle,            "cuIpcOpenMemHandle",           cuIpcOpenMemHandle_v2,         11000)        \
  X(ipcCloseMemHandle,           "cuIpcCloseMemHandle",          cuIpcCloseMemHandle,            4010)        \
  X(streamCreate,                "cuStreamCreate",               cuStreamCreate,                 2000)        \
  X(streamDestroy,               "cuStreamDestroy",              cuStreamDestroy_v2,             4000)        \
  X(streamSynchronize,           "cuStreamSynchronize",          cuStreamSynchronize,            2000)        \
  X(streamQuery,                 "cuStreamQuery",                cuStreamQuery,                  2000)        \
  X(streamWaitEvent,             "cuStreamWaitEvent",            cuStreamWaitEvent,              3020)        \
  X(streamIsCapturing,           "cuStreamIsCapturing",          cuStreamIsCapturing,           10000)        \
  X(streamGetCtx,                "cuStreamGetCtx",               cuStreamGetCtx_v2,             12050)        \
  X(streamGetFlags,              "cuStreamGetFlags",             cuStreamGetFlags,               5050)        \
  X(eventCreate,                 "cuEventCreate",                cuEventCreate,                  2000)        \
  X(eventDestroy,                "cuEventDestroy",               cuEventDestroy_v2,              4000)        \
  X(eventRecord,                 "cuEventRecord",                cuEventRecord,                  2000)        \
  X(eventQuery,                  "cuEventQuery",                 cuEventQuery,                   2000)        \
  X(eventSynchronize,            "cuEventSynchronize",           cuEventSynchronize,             2000)        \
  X(eventElapsedTime,            "cuEventElapsedTime",           cuEventElapsedTime_v2,         12080)        \
  X(streamWaitValue32,           "cuStreamWaitValue32",          cuStreamWaitValue32_v2,        11070)        \
  X(memHostGetDevicePointer,     "cuMemHostGetDevicePointer",    cuMemHostGetDevicePointer_v2,   3020)        \
  X(memcpy,                      "cuMemcpy",                     cuMemcpy,                       4000)        \
  X(memcpyAsync,                 "cuMemcpyAsync",                cuMemcpyAsync,                  4000)        \
  X(memcpyHtoD,                  "cuMemcpyHtoD",                 cuMemcpyHtoD_v2,                3020)        \
  X(memcpyDtoH,                  "cuMemcpyDtoH",                 cuMemcpyDtoH_v2,                3020)        \
  X(memcpyDtoD,                  "cuMemcpyDtoD",                 cuMemcpyDtoD_v2,                3020)        \
  X(memcpyHtoDAsync,             "cuMemcpyHtoDAsync",            cuMemcpyHtoDAsync_v2,           3020)        \
  X(memcpyDtoHAsync,             "cuMemcpyDtoHAsync",            cuMemcpyDtoHAsync_v2,           3020)        \
  X(memcpyDtoDAsync,             "cuMemcpyDtoDAsync",            cuMemcpyDtoDAsync_v2,           3020)        \
  X(memsetD8,                    "cuMemsetD8",                   cuMemsetD8_v2,                  3020)        \
  X(memsetD8Async,               "cuMemsetD8Async",              cuMemsetD8Async,                3020)        \
  X(pointerGetAttribute,         "cuPointerGetAttribute",        cuPointerGetAttribute,          4000)        \
  X(pointerGetAttributes,        "cuPointerGetAttributes",       cuPointerGetAttributes,         7000)        \
  X(funcGetParamInfo,            "cuFuncGetParamInfo",           cuFuncGetParamInfo,            12040)        \
  X(kernelGetParamInfo,          "cuKernelGetParamInfo",         cuKernelGetParamInfo,          12040)        \
  X(moduleLoadData,              "cuModuleLoadData",             cuModuleLoadData,               2000)        \
  X(moduleGetFunction,           "cuModuleGetFunction",          cuModuleGetFunction,            2000)        \
  X(moduleUnload,                "cuModuleUnload",               cuModuleUnload,                 2000)        \
  X(launchKernel,                "cuLaunchKernel",               cuLaunchKernel,                 4000)        \
  X(launchHostFunc,              "cuLaunchHostFunc",             cuLaunchHostFunc,              10000)        \
  X(graphGetNodes,               "cuGraphGetNodes",              cuGraphGetNodes,               10000)        \
  X(graphNodeGetType,            "cuGraphNodeGetType",           cuGraphNodeGetType,            10000)        \
  X(graphKernelNodeGetParams,    "cuGraphKernelNodeGetParams",   cuGraphKernelNodeGetParams_v2, 12000)        \
  X(graphMemcpyNodeGetParams,    "cuGraphMemcpyNodeGetParams",   cuGraphMemcpyNodeGetParams,    10000)        \
  X(graphMemsetNodeGetParams,    "cuGraphMemsetNodeGetParams",   cuGraphMemsetNodeGetParams,    10000)        \
  X(graphChildGraphNodeGetGraph, "cuGraphChildGraphNodeGetGraph", cuGraphChildGraphNodeGetGraph, 10000)      \
  X(getErrorName,                "cuGetErrorName",               cuGetErrorName,                 6000)        \
  X(getErrorString,              "cuGetErrorString",             cuGetErrorString,               6000)
// clang-format on
