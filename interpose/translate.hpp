// Translating between tidepool's Status and the codes CUDA callers expect:
// what the real call would have returned in the same situation.
#pragma once

#include <cuda.h>
#include <driver_types.h>

#include "util/util.hpp"

namespace tidepool::interpose {

inline CUresult to_curesult(const util::Status& s) {
  switch (s.error()) {
    case util::Error::ok: return CUDA_SUCCESS;
    case util::Error::out_of_memory: return CUDA_ERROR_OUT_OF_MEMORY;
    case util::Error::invalid_value:
    case util::Error::bad_input: return CUDA_ERROR_INVALID_VALUE;
    case util::Error::invalid_handle: return CUDA_ERROR_INVALID_HANDLE;
    case util::Error::other_device: return CUDA_ERROR_INVALID_CONTEXT;
    case util::Error::not_supported: return CUDA_ERROR_NOT_SUPPORTED;
    case util::Error::not_initialized:
    case util::Error::driver_missing: return CUDA_ERROR_NOT_INITIALIZED;
    default: return s.driver_code() != 0 ? static_cast<CUresult>(s.driver_code()) : CUDA_ERROR_UNKNOWN;
  }
}

inline cudaError_t to_cuda_error(const util::Status& s) {
  switch (s.error()) {
    case util::Error::ok: return cudaSuccess;
    case util::Error::out_of_memory: return cudaErrorMemoryAllocation;
    case util::Error::invalid_value:
    case util::Error::bad_input: return cudaErrorInvalidValue;
    case util::Error::invalid_handle: return cudaErrorInvalidResourceHandle;
    case util::Error::other_device: return cudaErrorInvalidDevice;
    case util::Error::not_supported: return cudaErrorNotSupported;
    case util::Error::not_initialized:
    case util::Error::driver_missing: return cudaErrorInitializationError;
    default: return cudaErrorUnknown;
  }
}

// A driver answer as cudart would report it.
inline cudaError_t to_cuda_error(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS: return cudaSuccess;
    case CUDA_ERROR_OUT_OF_MEMORY: return cudaErrorMemoryAllocation;
    case CUDA_ERROR_INVALID_VALUE: return cudaErrorInvalidValue;
    case CUDA_ERROR_INVALID_HANDLE: return cudaErrorInvalidResourceHandle;
    case CUDA_ERROR_NOT_SUPPORTED: return cudaErrorNotSupported;
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED: return cudaErrorInitializationError;
    case CUDA_ERROR_INVALID_CONTEXT: return cudaErrorDeviceUninitialized;
    default: return cudaErrorUnknown;
  }
}

}  // namespace tidepool::interpose
