// A program that links no CUDA library and finds the driver at run time, as
// cudart and frameworks do, for the preload tests:
//   dlsym    dlopen("libcuda.so.1") and dlsym of each entry point
//   proc_v1  dlsym of cuGetProcAddress (CUDA 11.3 signature), then resolve
//   proc_v2  dlsym of cuGetProcAddress_v2, then resolve, and resolve the
//            resolver itself through itself
#include <cuda.h>
#include <dlfcn.h>

#include <string>

#include "probe_common.hpp"

namespace {

using probe::fill;
using probe::holds;

using CallCount = std::uint64_t (*)(const char*);
using ResolverV1 = CUresult (*)(const char*, void**, int, cuuint64_t);
using ResolverV2 = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

struct Entries {
  decltype(&::cuInit) init = nullptr;
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) retain = nullptr;
  decltype(&::cuCtxSetCurrent) set_current = nullptr;
  decltype(&::cuMemAlloc_v2) alloc = nullptr;
  decltype(&::cuMemFree_v2) free = nullptr;
  decltype(&::cuMemAllocAsync) alloc_async = nullptr;
  decltype(&::cuMemFreeAsync) free_async = nullptr;
  decltype(&::cuStreamCreate) stream_create = nullptr;
  decltype(&::cuStreamDestroy_v2) stream_destroy = nullptr;
  decltype(&::cuStreamBeginCapture_v2) begin_capture = nullptr;
  decltype(&::cuStreamEndCapture) end_capture = nullptr;
  decltype(&::cuGraphDestroy) graph_destroy = nullptr;
};

template <typename Lookup>
Entries resolve(Lookup lookup) {
  Entries e;
  e.init = reinterpret_cast<decltype(e.init)>(lookup("cuInit"));
  e.device_get = reinterpret_cast<decltype(e.device_get)>(lookup("cuDeviceGet"));
  e.retain = reinterpret_cast<decltype(e.retain)>(lookup("cuDevicePrimaryCtxRetain"));
  e.set_current = reinterpret_cast<decltype(e.set_current)>(lookup("cuCtxSetCurrent"));
  e.alloc = reinterpret_cast<decltype(e.alloc)>(lookup("cuMemAlloc"));
  e.free = reinterpret_cast<decltype(e.free)>(lookup("cuMemFree"));
  e.alloc_async = reinterpret_cast<decltype(e.alloc_async)>(lookup("cuMemAllocAsync"));
  e.free_async = reinterpret_cast<decltype(e.free_async)>(lookup("cuMemFreeAsync"));
  e.stream_create = reinterpret_cast<decltype(e.stream_create)>(lookup("cuStreamCreate"));
  e.stream_destroy = reinterpret_cast<decltype(e.stream_destroy)>(lookup("cuStreamDestroy"));
  e.begin_capture = reinterpret_cast<decltype(e.begin_capture)>(lookup("cuStreamBeginCapture"));
  e.end_capture = reinterpret_cast<decltype(e.end_capture)>(lookup("cuStreamEndCapture"));
  e.graph_destroy = reinterpret_cast<decltype(e.graph_destroy)>(lookup("cuGraphDestroy"));
  return e;
}

void exercise(const Entries& e, CallCount calls) {
  PROBE_CHECK(e.init && e.device_get && e.retain && e.set_current && e.alloc && e.free && e.alloc_async &&
              e.free_async && e.stream_create && e.stream_destroy && e.begin_capture && e.end_capture &&
              e.graph_destroy);
  if (probe::failures != 0) return;
  CUdevice device = 0;
  CUcontext context = nullptr;
  PROBE_CHECK(e.init(0) == CUDA_SUCCESS);
  PROBE_CHECK(e.device_get(&device, 0) == CUDA_SUCCESS);
  PROBE_CHECK(e.retain(&context, device) == CUDA_SUCCESS);
  PROBE_CHECK(e.set_current(context) == CUDA_SUCCESS);
  CUdeviceptr blocks[4] = {};
  const std::size_t sizes[4] = {1000, 64 * 1024, 2 << 20, 9 << 20};
  for (int i = 0; i < 4; ++i) {
    PROBE_CHECK(e.alloc(&blocks[i], sizes[i]) == CUDA_SUCCESS && blocks[i] != 0);
    if (blocks[i] != 0) fill(blocks[i], sizes[i], static_cast<unsigned>(i));
  }
  for (int i = 0; i < 4; ++i) {
    if (blocks[i] == 0) continue;
    PROBE_CHECK(holds(blocks[i], sizes[i], static_cast<unsigned>(i)));
    PROBE_CHECK(e.free(blocks[i]) == CUDA_SUCCESS);
  }
  CUdeviceptr async = 0;
  PROBE_CHECK(e.alloc_async(&async, 4096, nullptr) == CUDA_SUCCESS);
  PROBE_CHECK(e.free_async(async, nullptr) == CUDA_SUCCESS);
  // Resolving the begin-capture entry points (as cudart does at its start)
  // is not a capture: a cached pair of each kind asks the driver nothing
  // about captures until one begins. (Each kind's first pair is left out:
  // it may take a block the other kind freed, and the pool may ask while it
  // fences that block.)
  std::uint64_t asked = 0;
  for (const bool ordered : {false, true}) {
    for (int pair = 0; pair < 2; ++pair) {
      const std::uint64_t before = calls("cuStreamIsCapturing");
      if (ordered) {
        PROBE_CHECK(e.alloc_async(&async, 4096, nullptr) == CUDA_SUCCESS &&
                    e.free_async(async, nullptr) == CUDA_SUCCESS);
      } else {
        PROBE_CHECK(e.alloc(&async, 4096) == CUDA_SUCCESS && e.free(async) == CUDA_SUCCESS);
      }
      if (pair == 1) asked += calls("cuStreamIsCapturing") - before;
    }
  }
  std::fprintf(stderr, "capture_questions_before=%llu\n", static_cast<unsigned long long>(asked));
  // A capture begun through the entry point this route resolved is seen:
  // an allocation into it goes to the driver, as a graph's own.
  CUstream stream = nullptr;
  PROBE_CHECK(e.stream_create(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  const std::uint64_t driver_async_before = calls("cuMemAllocAsync");
  PROBE_CHECK(e.begin_capture(stream, CU_STREAM_CAPTURE_MODE_RELAXED) == CUDA_SUCCESS);
  PROBE_CHECK(e.alloc_async(&async, 4096, stream) == CUDA_SUCCESS);
  PROBE_CHECK(calls("cuMemAllocAsync") == driver_async_before + 1);
  PROBE_CHECK(e.free_async(async, stream) == CUDA_SUCCESS);
  CUgraph graph = nullptr;
  PROBE_CHECK(e.end_capture(stream, &graph) == CUDA_SUCCESS && graph != nullptr);
  PROBE_CHECK(e.graph_destroy(graph) == CUDA_SUCCESS);
  PROBE_CHECK(e.stream_destroy(stream) == CUDA_SUCCESS);
  std::fprintf(stderr, "counts: sim_cuMemAlloc=%llu sim_cuMemAllocAsync=%llu\n",
               static_cast<unsigned long long>(calls("cuMemAlloc_v2")),
               static_cast<unsigned long long>(calls("cuMemAllocAsync")));
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "probe_dlopen: %s\n", dlerror());
    return 3;
  }
  auto calls = reinterpret_cast<CallCount>(dlsym(lib, "tidepool_sim_call_count"));
  PROBE_CHECK(calls != nullptr);
  // A name the driver lacks stays missing, hooks or not.
  PROBE_CHECK(dlsym(lib, "cuNoSuchEntryPoint") == nullptr);
  if (calls == nullptr) return probe::finish(mode.c_str());

  if (mode == "dlsym") {
    const std::string suffixed[] = {
        "cuInit",         "cuDeviceGet",        "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent",
        "cuMemAlloc_v2",  "cuMemFree_v2",       "cuMemAllocAsync",          "cuMemFreeAsync",
        "cuStreamCreate", "cuStreamDestroy_v2", "cuStreamBeginCapture_v2",  "cuStreamEndCapture",
        "cuGraphDestroy"};
    int i = 0;
    exercise(resolve([&](const char*) { return dlsym(lib, suffixed[i++].c_str()); }), calls);
  } else if (mode == "proc_v1") {
    auto resolver = reinterpret_cast<ResolverV1>(dlsym(lib, "cuGetProcAddress"));
    PROBE_CHECK(resolver != nullptr);
    if (resolver != nullptr) {
      exercise(resolve([&](const char* name) {
                 void* fn = nullptr;
                 return resolver(name, &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT) == CUDA_SUCCESS ? fn : nullptr;
               }),
               calls);
    }
  } else if (mode == "proc_v2") {
    auto first = reinterpret_cast<ResolverV2>(dlsym(lib, "cuGetProcAddress_v2"));
    PROBE_CHECK(first != nullptr);
    void* self = nullptr;
    CUdriverProcAddressQueryResult found{};
    if (first != nullptr) {
      PROBE_CHECK(first("cuGetProcAddress", &self, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &found) == CUDA_SUCCESS);
    }
    auto resolver = reinterpret_cast<ResolverV2>(self);
    PROBE_CHECK(resolver != nullptr);
    // A version too old for an entry point is still the driver's answer.
    void* too_old = nullptr;
    if (resolver != nullptr) {
      PROBE_CHECK(resolver("cuMemAllocAsync", &too_old, 11000, CU_GET_PROC_ADDRESS_DEFAULT, &found) ==
                  CUDA_ERROR_NOT_FOUND);
      PROBE_CHECK(found == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
      exercise(resolve([&](const char* name) {
                 void* fn = nullptr;
                 CUdriverProcAddressQueryResult status{};
                 return resolver(name, &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS
                            ? fn
                            : nullptr;
               }),
               calls);
    }
  } else {
    std::fprintf(stderr, "usage: probe_dlopen dlsym|proc_v1|proc_v2\n");
    return 2;
  }
  return probe::finish(mode.c_str());
}
