// The C API of tidepool.h over the runtime: translate, call, translate back.
// No exception escapes: each entry point catches everything at its boundary.
#include "tidepool/tidepool.h"

#include <cstdint>
#include <exception>
#include <limits>

#include "allocate_from.hpp"
#include "runtime/runtime.hpp"

namespace {

using tidepool::runtime::Allocator;
using tidepool::runtime::Runtime;
using tidepool::util::Error;
using tidepool::util::Status;

tidepool_status to_c(const Status& status) {
  switch (status.error()) {
    case Error::ok: return TIDEPOOL_OK;
    case Error::out_of_memory: return TIDEPOOL_ERROR_OUT_OF_MEMORY;
    case Error::invalid_value:
    case Error::invalid_handle:
    case Error::other_device: return TIDEPOOL_ERROR_INVALID_VALUE;
    case Error::not_supported: return TIDEPOOL_ERROR_NOT_SUPPORTED;
    case Error::not_initialized:
    case Error::driver_missing: return TIDEPOOL_ERROR_NOT_INITIALIZED;
    case Error::driver_error: return TIDEPOOL_ERROR_DRIVER;
    case Error::bad_config: return TIDEPOOL_ERROR_BAD_CONFIG;
    case Error::bad_input: return TIDEPOOL_ERROR_INVALID_VALUE;
    case Error::io_error: return TIDEPOOL_ERROR_IO;
  }
  return TIDEPOOL_ERROR_DRIVER;
}

template <typename F>
tidepool_status guarded(F&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return TIDEPOOL_ERROR_OUT_OF_MEMORY;
  } catch (...) {
    return TIDEPOOL_ERROR_DRIVER;
  }
}

Allocator* allocator_or_status(int device, tidepool_status* status) {
  Runtime& runtime = Runtime::get();
  if (runtime.passthrough()) {
    *status = runtime.config().passthrough ? TIDEPOOL_ERROR_BAD_CONFIG : TIDEPOOL_ERROR_NOT_INITIALIZED;
    return nullptr;
  }
  Allocator* allocator = runtime.allocator(device);
  if (allocator == nullptr) *status = TIDEPOOL_ERROR_INVALID_VALUE;
  return allocator;
}

tidepool_status allocate(void** ptr, size_t size, int device, void* stream, bool ordered, std::uintptr_t caller) {
  if (ptr == nullptr) return TIDEPOOL_ERROR_INVALID_VALUE;
  *ptr = nullptr;
  tidepool_status status = TIDEPOOL_OK;
  Allocator* allocator = allocator_or_status(device, &status);
  if (allocator == nullptr) return status;
  auto result = allocator->allocate(size, reinterpret_cast<std::uintptr_t>(stream), ordered, caller);
  if (!result) return to_c(result.status());
  *ptr = reinterpret_cast<void*>(result.value());
  return TIDEPOOL_OK;
}

tidepool_status release(void* ptr, void* stream, bool ordered) {
  if (ptr == nullptr) return TIDEPOOL_OK;
  return to_c(Runtime::get().deallocate(reinterpret_cast<std::uintptr_t>(ptr), reinterpret_cast<std::uintptr_t>(stream),
                                        ordered));
}

// Where the program's call into the C API returns to: who asked.
std::uintptr_t caller_of_entry(void* return_address) { return reinterpret_cast<std::uintptr_t>(return_address); }

}  // namespace

tidepool_status tidepool::capi::malloc_async_from(void** ptr, std::size_t size, int device, void* stream,
                                                  std::uintptr_t caller) noexcept {
  return guarded([&] { return allocate(ptr, size, device, stream, true, caller); });
}

extern "C" {

tidepool_status tidepool_malloc(void** ptr, size_t size, int device) {
  const std::uintptr_t caller = caller_of_entry(__builtin_return_address(0));
  return guarded([&] { return allocate(ptr, size, device, nullptr, false, caller); });
}

tidepool_status tidepool_free(void* ptr) {
  return guarded([&] { return release(ptr, nullptr, false); });
}

tidepool_status tidepool_malloc_async(void** ptr, size_t size, int device, void* stream) {
  const std::uintptr_t caller = caller_of_entry(__builtin_return_address(0));
  return guarded([&] { return allocate(ptr, size, device, stream, true, caller); });
}

tidepool_status tidepool_free_async(void* ptr, void* stream) {
  return guarded([&] { return release(ptr, stream, true); });
}

tidepool_status tidepool_get_stats(int device, tidepool_stats* out) {
  return guarded([&] {
    if (out == nullptr) return TIDEPOOL_ERROR_INVALID_VALUE;
    tidepool_status status = TIDEPOOL_OK;
    Allocator* allocator = allocator_or_status(device, &status);
    if (allocator == nullptr) return status;
    const tidepool::pool::PoolStats s = allocator->pool().stats();
    *out = tidepool_stats{};
    out->allocations = s.allocations;
    out->frees = s.frees;
    out->live_bytes = s.live_bytes;
    out->peak_live_bytes = s.peak_live_bytes;
    out->reserved_bytes = s.reserved_bytes;
    out->peak_reserved_bytes = s.peak_reserved_bytes;
    out->internal_waste_bytes = s.handed_out_bytes - s.live_bytes;
    out->ooms = s.ooms;
    out->maps = s.maps;
    out->unmaps = s.unmaps;
    out->trims = s.trims;
    out->utilization = s.utilization();
    out->external_fragmentation = s.external_fragmentation();
    const auto report = Runtime::get().report();
    for (const auto& d : report.devices) {
      if (d.device == device) out->passthrough_allocations = d.passthrough_allocations;
    }
    return TIDEPOOL_OK;
  });
}

tidepool_status tidepool_get_foreign_bytes(int device, uint64_t* bytes, uint64_t* peak_bytes) {
  return guarded([&] {
    tidepool_status status = TIDEPOOL_OK;
    if (allocator_or_status(device, &status) == nullptr) return status;
    const tidepool::runtime::ForeignMemory::DeviceFigures f = Runtime::get().foreign().figures(device);
    if (bytes != nullptr) *bytes = f.bytes;
    if (peak_bytes != nullptr) *peak_bytes = f.peak_bytes;
    return TIDEPOOL_OK;
  });
}

tidepool_status tidepool_report(const char* path) {
  return guarded([&] { return to_c(Runtime::get().write_report(path != nullptr ? path : "")); });
}

tidepool_status tidepool_set_device_limit(int device, size_t bytes) {
  return guarded([&] {
    tidepool_status status = TIDEPOOL_OK;
    Allocator* allocator = allocator_or_status(device, &status);
    if (allocator == nullptr) return status;
    return to_c(allocator->set_device_limit(bytes != 0 ? bytes : allocator->device_total_bytes()));
  });
}

tidepool_status tidepool_trim(int device, size_t* released) {
  return guarded([&] {
    tidepool_status status = TIDEPOOL_OK;
    Allocator* allocator = allocator_or_status(device, &status);
    if (allocator == nullptr) return status;
    const std::size_t bytes = allocator->pool().trim();
    if (released != nullptr) *released = bytes;
    return TIDEPOOL_OK;
  });
}

tidepool_status tidepool_prefetch(const void* ptr, size_t bytes, void* stream) {
  return guarded([&] {
    const auto address = reinterpret_cast<std::uintptr_t>(ptr);
    Allocator* owner = address != 0 ? Runtime::get().segment_owner_of(address) : nullptr;
    if (owner == nullptr) return TIDEPOOL_ERROR_INVALID_VALUE;
    if (Runtime::get().config().prefetch == tidepool::runtime::PrefetchMode::off) {
      std::uintptr_t base = 0;
      std::size_t size = 0;
      return owner->pool().find_containing(address, &base, &size) ? TIDEPOOL_OK : TIDEPOOL_ERROR_INVALID_VALUE;
    }
    return to_c(owner->pool().make_resident(address, bytes, reinterpret_cast<std::uintptr_t>(stream)));
  });
}

tidepool_status tidepool_advise(const void* ptr, size_t bytes, tidepool_advice advice) {
  return guarded([&] {
    using Advice = tidepool::pool::Pool::Advice;
    Advice what = Advice::will_need;
    switch (advice) {
      case TIDEPOOL_ADVICE_WILL_NEED: what = Advice::will_need; break;
      case TIDEPOOL_ADVICE_WONT_NEED: what = Advice::wont_need; break;
      case TIDEPOOL_ADVICE_KEEP_RESIDENT: what = Advice::keep_resident; break;
      default: return TIDEPOOL_ERROR_INVALID_VALUE;
    }
    const auto address = reinterpret_cast<std::uintptr_t>(ptr);
    Allocator* owner = address != 0 ? Runtime::get().segment_owner_of(address) : nullptr;
    if (owner == nullptr) return TIDEPOOL_ERROR_INVALID_VALUE;
    return to_c(owner->pool().advise(address, bytes, what));
  });
}

}  // extern "C"
