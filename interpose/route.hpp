// Where a hooked call goes: to a device's pool, to the real driver, or back
// to the caller as an error. This is the one place the hooks ask the runtime
// whether it is serving, which device a call is for, and whether a stream is
// being captured into a graph (then nothing is allocated or synchronised, and
// the call goes to the driver).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

#include "runtime/runtime.hpp"

namespace tidepool::interpose {

struct Route {
  // The pool to serve the call; null when it goes elsewhere.
  runtime::Allocator* allocator = nullptr;
  // With no allocator: CUDA_SUCCESS means "forward to the driver", anything
  // else is the caller's answer.
  CUresult error = CUDA_SUCCESS;
};

// Whether tidepool serves allocations at all (a good configuration and a driver).
inline bool serving() {
  const runtime::Runtime& rt = runtime::Runtime::get();
  return !rt.passthrough() && rt.driver() != nullptr;
}
// The stream a _ptsz entry point orders its work on: a null handle there
// means the calling thread's default stream, not the legacy one.
inline CUstream per_thread_default(CUstream stream) { return stream == nullptr ? CU_STREAM_PER_THREAD : stream; }
// An allocation on the current context's device.
Route route_allocation(CUstream stream, bool ordered);
// An allocation on `device` (the runtime API's current device).
Route route_allocation_on(int device, CUstream stream, bool ordered);
// Allocates from `allocator`, or from the pool of the stream's device when
// `stream` belongs to another device.
// `caller`: the hook's return address (TIDEPOOL_CALLER), who asked.
util::Result<std::uintptr_t> allocate_on(runtime::Allocator& allocator, std::size_t size, CUstream stream, bool ordered,
                                         std::uintptr_t caller);
// A free of `address` in the pools: false when it is the driver's to make
// (not tidepool's pointer); otherwise true, with the answer in `*status`
// (invalid_value for a double free or an interior pointer of a pool).
bool free_in_pools(std::uintptr_t address, CUstream stream, bool ordered, util::Status* status);
// What the driver answered to an allocation forwarded to it (`r`), passed
// on; while tidepool serves, a success is device memory held outside the
// pool (a memory pool of the program's own), counted against the budget.
CUresult driver_served(CUresult r, const CUdeviceptr* dptr, std::size_t bytes, std::uintptr_t caller);
// The same for a free forwarded to the driver.
CUresult driver_freed(CUresult r, CUdeviceptr dptr);
// The pool of the current context's device, or null.
runtime::Allocator* current_allocator();
// The pool whose segments hold `address`, live block or not; null when none
// or when tidepool is not serving.
runtime::Allocator* segment_owner(std::uintptr_t address);
// The row pitch of a pitched allocation `width` bytes wide.
std::size_t pitch_for(std::size_t width);

}  // namespace tidepool::interpose
