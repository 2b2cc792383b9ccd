// Driver-API hooks: cuMemAlloc/cuMemFree and their async, pitch, info,
// address-range and pointer-attribute companions. Each translates its
// arguments, calls the runtime, and translates the result. Pointers tidepool
// did not allocate, pass-through mode and stream capture go to the real
// driver untouched.
#include <cuda.h>

#include "hooks.hpp"
#include "real_symbols.hpp"
#include "route.hpp"
#include "runtime/runtime.hpp"
#include "translate.hpp"

namespace tidepool::interpose {

namespace {

CUresult allocate(CUdeviceptr* dptr, std::size_t size, CUstream stream, bool ordered, std::uintptr_t caller,
                  bool* forward) {
  *forward = false;
  if (dptr == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  const Route route = route_allocation(stream, ordered);
  if (route.allocator == nullptr) {
    *forward = route.error == CUDA_SUCCESS;
    return route.error;
  }
  auto result = allocate_on(*route.allocator, size, stream, ordered, caller);
  if (!result) return to_curesult(result.status());
  *dptr = static_cast<CUdeviceptr>(result.value());
  return CUDA_SUCCESS;
}

CUresult release(CUdeviceptr dptr, CUstream stream, bool ordered, bool* forward) {
  util::Status status;
  *forward = !free_in_pools(static_cast<std::uintptr_t>(dptr), stream, ordered, &status);
  return *forward ? CUDA_SUCCESS : to_curesult(status);
}

}  // namespace

}  // namespace tidepool::interpose

using tidepool::interpose::allocate;
using tidepool::interpose::driver_freed;
using tidepool::interpose::driver_served;
using tidepool::interpose::per_thread_default;
using tidepool::interpose::release;

TIDEPOOL_HOOK CUresult cuMemAlloc_v2(CUdeviceptr* dptr, std::size_t bytesize) {
  bool forward = false;
  const CUresult r = allocate(dptr, bytesize, nullptr, false, TIDEPOOL_CALLER(), &forward);
  return forward ? driver_served(TIDEPOOL_CALL_REAL_DRIVER(cuMemAlloc_v2, dptr, bytesize), dptr, bytesize,
                                 TIDEPOOL_CALLER())
                 : r;
}

TIDEPOOL_HOOK CUresult cuMemFree_v2(CUdeviceptr dptr) {
  bool forward = false;
  const CUresult r = release(dptr, nullptr, false, &forward);
  return forward ? driver_freed(TIDEPOOL_CALL_REAL_DRIVER(cuMemFree_v2, dptr), dptr) : r;
}

TIDEPOOL_HOOK CUresult cuMemAllocAsync(CUdeviceptr* dptr, std::size_t bytesize, CUstream stream) {
  bool forward = false;
  const CUresult r = allocate(dptr, bytesize, stream, true, TIDEPOOL_CALLER(), &forward);
  return forward ? driver_served(TIDEPOOL_CALL_REAL_DRIVER(cuMemAllocAsync, dptr, bytesize, stream), dptr, bytesize,
                                 TIDEPOOL_CALLER())
                 : r;
}

TIDEPOOL_HOOK CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  bool forward = false;
  const CUresult r = release(dptr, stream, true, &forward);
  return forward ? driver_freed(TIDEPOOL_CALL_REAL_DRIVER(cuMemFreeAsync, dptr, stream), dptr) : r;
}

// The _ptsz variants read the null stream as the per-thread stream.
TIDEPOOL_HOOK CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, std::size_t bytesize, CUstream stream) {
  bool forward = false;
  const CUresult r = allocate(dptr, bytesize, per_thread_default(stream), true, TIDEPOOL_CALLER(), &forward);
  return forward ? driver_served(TIDEPOOL_CALL_REAL_DRIVER(cuMemAllocAsync_ptsz, dptr, bytesize, stream), dptr,
                                 bytesize, TIDEPOOL_CALLER())
                 : r;
}

TIDEPOOL_HOOK CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream) {
  bool forward = false;
  const CUresult r = release(dptr, per_thread_default(stream), true, &forward);
  return forward ? driver_freed(TIDEPOOL_CALL_REAL_DRIVER(cuMemFreeAsync_ptsz, dptr, stream), dptr) : r;
}

TIDEPOOL_HOOK CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, std::size_t* pitch, std::size_t width, std::size_t height,
                                          unsigned int element_bytes) {
  if (tidepool::interpose::serving()) {
    if (pitch == nullptr || width == 0 || height == 0 ||
        (element_bytes != 4 && element_bytes != 8 && element_bytes != 16)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    const std::size_t row = tidepool::interpose::pitch_for(width);
    std::size_t bytes = 0;
    if (row < width || __builtin_mul_overflow(row, height, &bytes)) return CUDA_ERROR_INVALID_VALUE;
    bool forward = false;
    const CUresult r = allocate(dptr, bytes, nullptr, false, TIDEPOOL_CALLER(), &forward);
    if (!forward) {
      if (r == CUDA_SUCCESS) *pitch = row;
      return r;
    }
  }
  return TIDEPOOL_CALL_REAL_DRIVER(cuMemAllocPitch_v2, dptr, pitch, width, height, element_bytes);
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
  if (owner == nullptr) return TIDEPOOL_CALL_REAL_DRIVER(cuMemGetAddressRange_v2, base, size, dptr);
  std::uintptr_t found_base = 0;
  std::size_t found_size = 0;
  // Inside a pool segment but in no live block: no allocation is there.
  if (!owner->pool().find_containing(address, &found_base, &found_size)) return CUDA_ERROR_NOT_FOUND;
  if (base != nullptr) *base = static_cast<CUdeviceptr>(found_base);
  if (size != nullptr) *size = found_size;
  return CUDA_SUCCESS;
}

namespace {

// Answers an attribute of an address inside a pool segment. Addresses in no
// live allocation get what the driver says of unallocated memory
// (CUDA_ERROR_INVALID_VALUE); false leaves a live block's other attributes to
// the driver, which sees the mapping beneath (none under a compressed
// evicted page: the ones a program asks of any device pointer are answered
// here).
bool pool_attribute(tidepool::runtime::Allocator& owner, std::uintptr_t address, CUpointer_attribute attribute,
                    void* data, CUresult* result) {
  std::uintptr_t base = 0;
  std::size_t size = 0;
  std::uint64_t buffer_id = 0;
  if (!owner.pool().find_containing(address, &base, &size, &buffer_id)) {
    *result = CUDA_ERROR_INVALID_VALUE;
    return true;
  }
  *result = CUDA_SUCCESS;
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *static_cast<CUdeviceptr*>(data) = base; return true;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *static_cast<std::size_t*>(data) = size; return true;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *static_cast<unsigned long long*>(data) = buffer_id; return true;
    case CU_POINTER_ATTRIBUTE_CONTEXT: *static_cast<CUcontext*>(data) = owner.context(); return true;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *static_cast<int*>(data) = owner.device(); return true;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *static_cast<unsigned*>(data) = CU_MEMORYTYPE_DEVICE; return true;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *static_cast<CUdeviceptr*>(data) = address; return true;
    // Device memory has none, evicted pages (host memory beneath) included.
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: *result = CUDA_ERROR_INVALID_VALUE; return true;
    default: return false;
  }
}

// What cuPointerGetAttributes writes for an address that is no allocation:
// the attribute's null value, sized as the driver documents it.
void null_attribute(CUpointer_attribute attribute, void* data) {
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: *static_cast<CUcontext*>(data) = nullptr; return;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    case CU_POINTER_ATTRIBUTE_MAPPED:
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: *static_cast<unsigned*>(data) = 0; return;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *static_cast<int*>(data) = -2; return;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *static_cast<CUdeviceptr*>(data) = 0; return;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: *static_cast<void**>(data) = nullptr; return;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *static_cast<std::size_t*>(data) = 0; return;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: *static_cast<unsigned long long*>(data) = 0; return;
    default: return;
  }
}

}  // namespace

TIDEPOOL_HOOK CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  const auto address = static_cast<std::uintptr_t>(ptr);
  tidepool::runtime::Allocator* owner = tidepool::interpose::segment_owner(address);
  CUresult result = CUDA_SUCCESS;
  if (owner != nullptr && data != nullptr && pool_attribute(*owner, address, attribute, data, &result)) return result;
  return TIDEPOOL_CALL_REAL_DRIVER(cuPointerGetAttribute, data, attribute, ptr);
}

TIDEPOOL_HOOK CUresult cuPointerGetAttributes(unsigned int count, CUpointer_attribute* attributes, void** data,
                                              CUdeviceptr ptr) {
  const auto address = static_cast<std::uintptr_t>(ptr);
  tidepool::runtime::Allocator* owner = tidepool::interpose::segment_owner(address);
  if (owner == nullptr || attributes == nullptr || data == nullptr) {
    return TIDEPOOL_CALL_REAL_DRIVER(cuPointerGetAttributes, count, attributes, data, ptr);
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
    // Not an allocation: the driver's null values and success, as documented.
    if (result == CUDA_ERROR_INVALID_VALUE) null_attribute(attributes[i], data[i]);
    if (result != CUDA_SUCCESS && result != CUDA_ERROR_INVALID_VALUE) return result;
  }
  return CUDA_SUCCESS;
}
