// See route.hpp.
#include "route.hpp"

#include "util/util.hpp"

namespace tidepool::interpose {

namespace {

using runtime::Runtime;

}  // namespace

namespace {

// route_allocation_on() once serving() holds.
Route route_served_allocation(int device, CUstream stream, bool ordered) {
  Runtime& rt = Runtime::get();
  if (rt.capture_possible() && driver::capturing(rt.driver()->api(), ordered ? stream : nullptr)) return {};
  if (ordered && rt.allocation_for_program_pool(device, stream)) {
    rt.note_passthrough_allocation(device);
    return {};
  }
  Route route;
  route.allocator = rt.allocator(device);
  if (route.allocator == nullptr) rt.note_passthrough_allocation(device);
  return route;
}

}  // namespace

Route route_allocation_on(int device, CUstream stream, bool ordered) {
  if (!serving()) return {};
  return route_served_allocation(device, stream, ordered);
}

Route route_allocation(CUstream stream, bool ordered) {
  if (!serving()) return {};
  CUdevice device = 0;
  // No current context: the driver's own answer (CUDA_ERROR_INVALID_CONTEXT).
  if (const CUresult r = Runtime::get().driver()->api().ctxGetDevice(&device); r != CUDA_SUCCESS) {
    return {nullptr, r};
  }
  return route_served_allocation(device, stream, ordered);
}

util::Result<std::uintptr_t> allocate_on(runtime::Allocator& allocator, std::size_t size, CUstream stream, bool ordered,
                                         std::uintptr_t caller) {
  auto result = allocator.allocate(size, reinterpret_cast<std::uintptr_t>(stream), ordered, caller);
  if (result || result.status().error() != util::Error::other_device) return result;
  runtime::Allocator* owner = Runtime::get().allocator_of_stream(stream);
  if (owner == nullptr || owner == &allocator) return result;
  return owner->allocate(size, reinterpret_cast<std::uintptr_t>(stream), ordered, caller);
}

bool free_in_pools(std::uintptr_t address, CUstream stream, bool ordered, util::Status* status) {
  if (address == 0 || !serving()) return false;
  Runtime& rt = Runtime::get();
  // During capture a stream-ordered free becomes a graph free node, which
  // the driver accepts only for the graph's own allocations: a pool block
  // is refused as the driver refuses it, and stays allocated (the program
  // frees it outside the capture).
  if (ordered && rt.capture_possible() && driver::capturing(rt.driver()->api(), stream) &&
      rt.owner_of(address) != nullptr) {
    runtime::log_debug("free of {:#x} during stream capture: not a graph allocation", address);
    *status = {util::Error::invalid_value, "a pool block freed in stream order during a capture"};
    return true;
  }
  *status = rt.deallocate(address, reinterpret_cast<std::uintptr_t>(stream), ordered);
  if (status->error() != util::Error::invalid_value) return true;
  // No pool's live block: inside a pool segment, a double free or an
  // interior pointer (nothing changes; the caller hears what the driver
  // would say); elsewhere, the driver's.
  if (rt.segment_owner_of(address) == nullptr) return false;
  runtime::log_debug("free of {:#x}: not a live tidepool block", address);
  return true;
}

CUresult driver_served(CUresult r, const CUdeviceptr* dptr, std::size_t bytes, std::uintptr_t caller) {
  if (r == CUDA_SUCCESS && dptr != nullptr && serving()) Runtime::get().driver_allocated(*dptr, bytes, caller);
  return r;
}

CUresult driver_freed(CUresult r, CUdeviceptr dptr) {
  if (r == CUDA_SUCCESS && serving()) Runtime::get().driver_freed(dptr);
  return r;
}

runtime::Allocator* current_allocator() {
  if (!serving()) return nullptr;
  CUdevice device = 0;
  if (Runtime::get().driver()->api().ctxGetDevice(&device) != CUDA_SUCCESS) return nullptr;
  return Runtime::get().allocator(device);
}

runtime::Allocator* segment_owner(std::uintptr_t address) {
  if (!serving()) return nullptr;
  return Runtime::get().segment_owner_of(address);
}

std::size_t pitch_for(std::size_t width) {
  // The row alignment cudaMallocPitch gives on current devices.
  constexpr std::size_t kPitchAlignment = 512;
  return util::round_up(width, kPitchAlignment);
}

}  // namespace tidepool::interpose
