// The table of CUDA driver entry points tidepool calls, as one X-macro.
//
// Each row is X(field, "name as cuGetProcAddress knows it", exported_symbol).
// The exported symbol is the versioned ABI name (cuMemAlloc_v2, ...) and gives
// the field its type; the plain name is what cuGetProcAddress resolves, which
// returns the variant that matches the requested CUDA version. Adding an entry
// point is one row here. cuStreamGetCtx resolves to its 12.5 form (with a green
// context out-parameter) on current drivers; older drivers' two-argument form
// ignores the third argument under the platform ABI.
#pragma once

#include <cuda.h>

// clang-format off
#define TIDEPOOL_DRIVER_ENTRY_POINTS(X)                                          \
  X(init,                        "cuInit",                        cuInit)                        \
  X(driverGetVersion,            "cuDriverGetVersion",            cuDriverGetVersion)            \
  X(deviceGet,                   "cuDeviceGet",                   cuDeviceGet)                   \
  X(deviceGetCount,              "cuDeviceGetCount",              cuDeviceGetCount)              \
  X(deviceGetAttribute,          "cuDeviceGetAttribute",          cuDeviceGetAttribute)          \
  X(deviceTotalMem,              "cuDeviceTotalMem",              cuDeviceTotalMem_v2)           \
  X(devicePrimaryCtxRetain,      "cuDevicePrimaryCtxRetain",      cuDevicePrimaryCtxRetain)      \
  X(devicePrimaryCtxRelease,     "cuDevicePrimaryCtxRelease",     cuDevicePrimaryCtxRelease_v2)  \
  X(ctxGetCurrent,               "cuCtxGetCurrent",               cuCtxGetCurrent)               \
  X(ctxSetCurrent,               "cuCtxSetCurrent",               cuCtxSetCurrent)               \
  X(ctxGetDevice,                "cuCtxGetDevice",                cuCtxGetDevice)                \
  X(ctxSynchronize,              "cuCtxSynchronize",              cuCtxSynchronize)              \
  X(ctxPushCurrent,              "cuCtxPushCurrent",              cuCtxPushCurrent_v2)           \
  X(ctxPopCurrent,               "cuCtxPopCurrent",               cuCtxPopCurrent_v2)            \
  X(memAlloc,                    "cuMemAlloc",                    cuMemAlloc_v2)                 \
  X(memFree,                     "cuMemFree",                     cuMemFree_v2)                  \
  X(memAllocPitch,               "cuMemAllocPitch",               cuMemAllocPitch_v2)            \
  X(memGetInfo,                  "cuMemGetInfo",                  cuMemGetInfo_v2)               \
  X(memGetAddressRange,          "cuMemGetAddressRange",          cuMemGetAddressRange_v2)       \
  X(memAllocAsync,               "cuMemAllocAsync",               cuMemAllocAsync)               \
  X(memFreeAsync,                "cuMemFreeAsync",                cuMemFreeAsync)                \
  X(memAllocHost,                "cuMemAllocHost",                cuMemAllocHost_v2)             \
  X(memHostAlloc,                "cuMemHostAlloc",                cuMemHostAlloc)                \
  X(memFreeHost,                 "cuMemFreeHost",                 cuMemFreeHost)                 \
  X(memAddressReserve,           "cuMemAddressReserve",           cuMemAddressReserve)           \
  X(memAddressFree,              "cuMemAddressFree",              cuMemAddressFree)              \
  X(memCreate,                   "cuMemCreate",                   cuMemCreate)                   \
  X(memRelease,                  "cuMemRelease",                  cuMemRelease)                  \
  X(memMap,                      "cuMemMap",                      cuMemMap)                      \
  X(memUnmap,                    "cuMemUnmap",                    cuMemUnmap)                    \
  X(memSetAccess,                "cuMemSetAccess",                cuMemSetAccess)                \
  X(memGetAllocationGranularity, "cuMemGetAllocationGranularity", cuMemGetAllocationGranularity) \
  X(streamCreate,                "cuStreamCreate",                cuStreamCreate)                \
  X(streamDestroy,               "cuStreamDestroy",               cuStreamDestroy_v2)            \
  X(streamSynchronize,           "cuStreamSynchronize",           cuStreamSynchronize)           \
  X(streamQuery,                 "cuStreamQuery",                 cuStreamQuery)                 \
  X(streamWaitEvent,             "cuStreamWaitEvent",             cuStreamWaitEvent)             \
  X(streamIsCapturing,           "cuStreamIsCapturing",           cuStreamIsCapturing)           \
  X(streamGetCtx,                "cuStreamGetCtx",                cuStreamGetCtx_v2)             \
  X(streamGetFlags,              "cuStreamGetFlags",              cuStreamGetFlags)              \
  X(eventCreate,                 "cuEventCreate",                 cuEventCreate)                 \
  X(eventDestroy,                "cuEventDestroy",                cuEventDestroy_v2)             \
  X(eventRecord,                 "cuEventRecord",                 cuEventRecord)                 \
  X(eventQuery,                  "cuEventQuery",                  cuEventQuery)                  \
  X(eventSynchronize,            "cuEventSynchronize",            cuEventSynchronize)            \
  X(memcpy,                      "cuMemcpy",                      cuMemcpy)                      \
  X(memcpyAsync,                 "cuMemcpyAsync",                 cuMemcpyAsync)                 \
  X(memcpyHtoD,                  "cuMemcpyHtoD",                  cuMemcpyHtoD_v2)               \
  X(memcpyDtoH,                  "cuMemcpyDtoH",                  cuMemcpyDtoH_v2)               \
  X(memcpyDtoD,                  "cuMemcpyDtoD",                  cuMemcpyDtoD_v2)               \
  X(memcpyHtoDAsync,             "cuMemcpyHtoDAsync",             cuMemcpyHtoDAsync_v2)          \
  X(memcpyDtoHAsync,             "cuMemcpyDtoHAsync",             cuMemcpyDtoHAsync_v2)          \
  X(memcpyDtoDAsync,             "cuMemcpyDtoDAsync",             cuMemcpyDtoDAsync_v2)          \
  X(memsetD8,                    "cuMemsetD8",                    cuMemsetD8_v2)                 \
  X(memsetD8Async,               "cuMemsetD8Async",               cuMemsetD8Async)               \
  X(pointerGetAttribute,         "cuPointerGetAttribute",         cuPointerGetAttribute)         \
  X(pointerGetAttributes,        "cuPointerGetAttributes",        cuPointerGetAttributes)        \
  X(funcGetParamInfo,            "cuFuncGetParamInfo",            cuFuncGetParamInfo)            \
  X(launchKernel,                "cuLaunchKernel",                cuLaunchKernel)                \
  X(launchHostFunc,              "cuLaunchHostFunc",              cuLaunchHostFunc)              \
  X(getErrorName,                "cuGetErrorName",                cuGetErrorName)                \
  X(getErrorString,              "cuGetErrorString",              cuGetErrorString)
// clang-format on
