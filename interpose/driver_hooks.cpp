// Driver-API hooks: cuMemAlloc/cuMemFree and their async, pitch, info,
// address-range and pointer-attribute companions. Each translates its
// arguments, calls the runtime, and translates the result. Pointers tidepool
// did not allocate, pass-through mode and stream capture go to the real
// driver untouched.
#include <cuda.h>

#include "hooks.hpp"
#include "real_symbols.hpp"
#include "route.hpp"
#include "runtime/memory_info.hpp"
#include "translate.hpp"

namespace tidepool::interpose {

namespace {

CUresult allocate(CUdeviceptr* dptr, std::size_t size, CUstream stream, bool ordered, bool* forward) {
  *forward = false;
  if (dptr == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  const Route route = route_allocation(stream, ordered);
  if (route.allocator == nullptr) {
    *forward = route.error == CUDA_SUCCESS;
    return route.error;
  }
  auto result = route.allocator->allocate(size, reinterpret_cast<std::uintptr_t>(stream), ordered);
  if (!result) return to_curesult(result.status());
  *dptr = static_cast<CUdeviceptr>(result.value());
  return CUDA_SUCCESS;
}

CUresult release(CUdeviceptr dptr, CUstream stream, bool ordered, bool* forward) {
  const Route route = route_free(static_cast<std::uintptr_t>(dptr), stream, ordered);
  *forward = route.allocator == nullptr && route.error == CUDA_SUCCESS && !route.keep;
  if (route.allocator == nullptr) return route.error;
  return to_curesult(route.allocator->deallocate(static_cast<std::uintptr_t>(dptr),
                                                 reinterpret_cast<std::uintptr_t>(stream), ordered));
}

}  // namespace

}  // namespace tidepool::interpose

using tidepool::interpose::allocate;
using tidepool::interpose::release;

TIDEPOOL_HOOK CUresult cuMemAlloc_v2(CUdeviceptr* dptr, std::size_t bytesize) {
  bool forward = false;
  const CUresult r = allocate(dptr, bytesize, nullptr, false, &forward);
  return forward ? TIDEPOOL_REAL_DRIVER(cuMemAlloc_v2)(dptr, bytesize) : r;
}

TIDEPOOL_HOOK CUresult cuMemFree_v2(CUdeviceptr dptr) {
  bool forward = false;
  const CUresult r = release(dptr, nullptr, false, &forward);
  return forward ? TIDEPOOL_REAL_DRIVER(cuMemFree_v2)(dptr) : r;
}

TIDEPOOL_HOOK CUresult cuMemAllocAsync(CUdeviceptr* dptr, std::size_t bytesize, CUstream stream) {
  bool forward = false;
  const CUresult r = allocate(dptr, bytesize, stream, true, &forward);
  return forward ? TIDEPOOL_REAL_DRIVER(cuMemAllocAsync)(dptr, bytesize, stream) : r;
}

TIDEPOOL_HOOK CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  bool forward = false;
  const CUresult r = release(dptr, stream, true, &forward);
  return forward ? TIDEPOOL_REAL_DRIVER(cuMemFreeAsync)(dptr, stream) : r;
}

// The _ptsz variants read the null stream as the per-thread stream.
TIDEPOOL_HOOK CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, std::size_t bytesize, CUstream stream) {
  bool forward = false;
  const CUresult r = allocate(dptr, bytesize, stream == nullptr ? CU_STREAM_PER_THREAD : stream, true, &forward);
  return forward ? TIDEPOOL_REAL_DRIVER(cuMemAllocAsync_ptsz)(dptr, bytesize, stream) : r;
}

TIDEPOOL_HOOK CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream) {
  bool forward = false;
  const CUresult r = release(dptr, stream == nullptr ? CU_STREAM_PER_THREAD : stream, true, &forward);
  return forward ? TIDEPOOL_REAL_DRIVER(cuMemFreeAsync_ptsz)(dptr, stream) : r;
}

TIDEPOOL_HOOK CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, std::size_t* pitch, std::size_t width, std::size_t height,
                                          unsigned int element_bytes) {
  if (tidepool::interpose::serving()) {
    if (pitch == nullptr || width == 0 || height == 0 ||
        (element_bytes != 4 && element_bytes != 8 && element_bytes != 16)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    const std::size_t row = tidepool::interpose::pitch_for(width);
    bool forward = false;
    const CUresult r = allocate(dptr, row * height, nullptr, false, &forward);
    if (!forward) {
      if (r == CUDA_SUCCESS) *pitch = row;
      return r;
    }
  }
  return TIDEPOOL_REAL_DRIVER(cuMemAllocPitch_v2)(dptr, pitch, width, height, element_bytes);
}

TIDEPOOL_HOOK CUresult cuMemGetInfo_v2(std::size_t* free_bytes, std::size_t* total_bytes) {
  auto real = TIDEPOOL_REAL_DRIVER(cuMemGetInfo_v2);
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult r = real(free_bytes, total_bytes);
  if (r != CUDA_SUCCESS || free_bytes == nullptr || total_bytes == nullptr) return r;
  if (tidepool::runtime::Allocator* allocator = tidepool::interpose::current_allocator()) {
    const auto seen = tidepool::runtime::visible_memory(*allocator, {*free_bytes, *total_bytes});
    *free_bytes = seen.free_bytes;
    *total_bytes = seen.total_bytes;
  }
  return CUDA_SUCCESS;
}

TIDEPOOL_HOOK CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, std::size_t* size, CUdeviceptr dptr) {
  const auto address = static_cast<std::uintptr_t>(dptr);
  tidepool::runtime::Allocator* owner = tidepool::interpose::segment_owner(address);
  if (owner == nullptr) return TIDEPOOL_REAL_DRIVER(cuMemGetAddressRange_v2)(base, size, dptr);
  std::uintptr_t found_base = 0;
  std::size_t found_size = 0;
  // Inside a pool segment but in no live block: no allocation is there.
  if (!owner->pool().find_containing(address, &found_base, &found_size)) return CUDA_ERROR_NOT_FOUND;
  if (base != nullptr) *base = static_cast<CUdeviceptr>(found_base);
  if (size != nullptr) *size = found_size;
  return CUDA_SUCCESS;
}

namespace {

// Answers the attributes in which a pool block differs from the mapping the
// driver sees beneath it; false for every other attribute.
bool pool_attribute(tidepool::runtime::Allocator& owner, std::uintptr_t address, CUpointer_attribute attribute,
                    void* data, CUresult* result) {
  std::uintptr_t base = 0;
  std::size_t size = 0;
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
      if (!owner.pool().find_containing(address, &base, &size)) {
        *result = CUDA_ERROR_INVALID_VALUE;
        return true;
      }
      if (attribute == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR) *static_cast<CUdeviceptr*>(data) = base;
      if (attribute == CU_POINTER_ATTRIBUTE_RANGE_SIZE) *static_cast<std::size_t*>(data) = size;
      // A buffer id is unique per allocation for as long as it lives.
      if (attribute == CU_POINTER_ATTRIBUTE_BUFFER_ID) *static_cast<unsigned long long*>(data) = base;
      *result = CUDA_SUCCESS;
      return true;
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      *static_cast<CUcontext*>(data) = owner.context();
      *result = CUDA_SUCCESS;
      return true;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      *static_cast<int*>(data) = owner.device();
      *result = CUDA_SUCCESS;
      return true;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned*>(data) = CU_MEMORYTYPE_DEVICE;
      *result = CUDA_SUCCESS;
      return true;
    default: return false;
  }
}

}  // namespace

TIDEPOOL_HOOK CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  const auto address = static_cast<std::uintptr_t>(ptr);
  tidepool::runtime::Allocator* owner = tidepool::interpose::segment_owner(address);
  CUresult result = CUDA_SUCCESS;
  if (owner != nullptr && data != nullptr && pool_attribute(*owner, address, attribute, data, &result)) return result;
  return TIDEPOOL_REAL_DRIVER(cuPointerGetAttribute)(data, attribute, ptr);
}

TIDEPOOL_HOOK CUresult cuPointerGetAttributes(unsigned int count, CUpointer_attribute* attributes, void** data,
                                              CUdeviceptr ptr) {
  const auto address = static_cast<std::uintptr_t>(ptr);
  tidepool::runtime::Allocator* owner = tidepool::interpose::segment_owner(address);
  if (owner == nullptr || attributes == nullptr || data == nullptr) {
    return TIDEPOOL_REAL_DRIVER(cuPointerGetAttributes)(count, attributes, data, ptr);
  }
  // Unlike cuPointerGetAttribute, this call answers every attribute it can
  // and leaves the rest to the driver, one by one.
  auto single = TIDEPOOL_REAL_DRIVER(cuPointerGetAttribute);
  for (unsigned i = 0; i < count; ++i) {
    if (data[i] == nullptr) continue;
    CUresult result = CUDA_SUCCESS;
    if (!pool_attribute(*owner, address, attributes[i], data[i], &result) && single != nullptr) {
      result = single(data[i], attributes[i], ptr);
    }
    if (result != CUDA_SUCCESS && result != CUDA_ERROR_INVALID_VALUE) return result;
  }
  return CUDA_SUCCESS;
}
