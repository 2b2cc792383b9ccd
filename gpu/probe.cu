// gpu/probe.cu: what the GPU machine's driver can do, as one JSON line:
// driver/runtime versions, the VMM, host-located VMM (HOST, HOST_NUMA) and
// granularity attributes, a trial host-located cuMemCreate + map + access +
// memset + readback, one page mapped at two ranges (parked pages), the
// median latency of cuMemCreate/Map/SetAccess/Unmap/Release per 2 MiB page,
// the same of a host-located page's create and release (pinning), and
// pinned cudaMemcpyAsync bandwidth each way.
#define PROGRAM "probe"
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "common.cuh"

namespace {

// A driver call's result as the probe's JSON records it (0: success);
// common.cuh's DRV aborts instead.
int result_of(CUresult r) { return static_cast<int>(r); }

CUdevice dev;
std::string json = "{";

void put(const char* key, const std::string& value, bool quote) {
  if (json.size() > 1) json += ",";
  json += "\"" + std::string(key) + "\":" + (quote ? "\"" + value + "\"" : value);
}
void put(const char* key, double value) {
  char text[64];
  std::snprintf(text, sizeof text, value == static_cast<long long>(value) ? "%.0f" : "%.3f", value);
  put(key, std::string(text), false);
}
void put(const char* key, const char* value) { put(key, std::string(value), true); }

int attribute(CUdevice_attribute a) {
  int v = -1;
  return cuDeviceGetAttribute(&v, a, dev) == CUDA_SUCCESS ? v : -1;
}

CUmemAllocationProp prop_for(CUmemLocationType type, int id) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = type;
  prop.location.id = id;
  return prop;
}

// Creates, maps and grants the device access to one granule located at
// (type, id), writes it with cuMemsetD8 and reads it back. 0 when all worked,
// else the first failing step's CUresult (or -1 for wrong bytes).
int trial(CUmemLocationType type, int id) {
  CUmemAllocationProp prop = prop_for(type, id);
  size_t gran = 0;
  if (int r = result_of(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM))) return r;
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle handle;
  if (int r = result_of(cuMemAddressReserve(&va, gran, 0, 0, 0))) return r;
  int result = result_of(cuMemCreate(&handle, gran, &prop, 0));
  if (result == 0) {
    result = result_of(cuMemMap(va, gran, 0, handle, 0));
    CUmemAccessDesc access = {};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = 0;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (result == 0) result = result_of(cuMemSetAccess(va, gran, &access, 1));
    if (result == 0) result = result_of(cuMemsetD8(va, 0x7e, gran));
    if (result == 0) {
      std::vector<unsigned char> host(gran);
      result = result_of(cuMemcpyDtoH(host.data(), va, gran));
      if (result == 0 && std::count(host.begin(), host.end(), 0x7e) != static_cast<long>(gran)) result = -1;
    }
    cuMemUnmap(va, gran);
    cuMemRelease(handle);
  }
  cuMemAddressFree(va, gran);
  return result;
}

// Maps one device page at two reserved ranges (what the pool's parked pages
// rely on), writes through the first and reads through the second. 0 when the
// bytes agree, else the first failing step's CUresult (or -1 for wrong bytes).
int double_map_trial() {
  CUmemAllocationProp prop = prop_for(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  size_t gran = 0;
  if (int r = result_of(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM))) return r;
  CUdeviceptr first = 0, second = 0;
  CUmemGenericAllocationHandle handle;
  if (int r = result_of(cuMemAddressReserve(&first, gran, 0, 0, 0))) return r;
  int result = result_of(cuMemAddressReserve(&second, gran, 0, 0, 0));
  bool created = false;
  if (result == 0) {
    result = result_of(cuMemCreate(&handle, gran, &prop, 0));
    created = result == 0;
  }
  CUmemAccessDesc access = {};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  bool first_mapped = false, second_mapped = false;
  if (result == 0) first_mapped = (result = result_of(cuMemMap(first, gran, 0, handle, 0))) == 0;
  if (result == 0) second_mapped = (result = result_of(cuMemMap(second, gran, 0, handle, 0))) == 0;
  if (result == 0) result = result_of(cuMemSetAccess(first, gran, &access, 1));
  if (result == 0) result = result_of(cuMemSetAccess(second, gran, &access, 1));
  if (result == 0) result = result_of(cuMemsetD8(first, 0x5a, gran));
  if (result == 0) {
    std::vector<unsigned char> host(gran);
    result = result_of(cuMemcpyDtoH(host.data(), second, gran));
    if (result == 0 && std::count(host.begin(), host.end(), 0x5a) != static_cast<long>(gran)) result = -1;
  }
  if (first_mapped) cuMemUnmap(first, gran);
  if (second_mapped) cuMemUnmap(second, gran);
  if (created) cuMemRelease(handle);
  if (second) cuMemAddressFree(second, gran);
  cuMemAddressFree(first, gran);
  return result;
}

double median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void vmm_latencies() {
  const size_t page = 2 << 20;
  const int pages = 64;
  CUdeviceptr va = 0;
  if (cuMemAddressReserve(&va, page * pages, 0, 0, 0) != CUDA_SUCCESS) return;
  CUmemAllocationProp prop = prop_for(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  CUmemAccessDesc access = {};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  std::vector<CUmemGenericAllocationHandle> handles(pages);
  std::vector<double> create, map, set_access, unmap, release;
  int failed = 0;
  for (int i = 0; i < pages; ++i) {
    double t = now_us();
    failed |= result_of(cuMemCreate(&handles[i], page, &prop, 0));
    create.push_back(now_us() - t);
    t = now_us();
    failed |= result_of(cuMemMap(va + i * page, page, 0, handles[i], 0));
    map.push_back(now_us() - t);
    t = now_us();
    failed |= result_of(cuMemSetAccess(va + i * page, page, &access, 1));
    set_access.push_back(now_us() - t);
  }
  for (int i = 0; i < pages; ++i) {
    double t = now_us();
    failed |= result_of(cuMemUnmap(va + i * page, page));
    unmap.push_back(now_us() - t);
  }
  // The same pages mapped one by one again, then one call each over the
  // whole run: what a batched move pays for access (tidepool grants once
  // per run of adjacent pages), and whether one unmap may span mappings.
  int mapped_again = 0;
  for (int i = 0; i < pages; ++i) mapped_again += cuMemMap(va + i * page, page, 0, handles[i], 0) == CUDA_SUCCESS;
  if (mapped_again == pages) {
    double t = now_us();
    const int access_run = result_of(cuMemSetAccess(va, page * pages, &access, 1));
    put("cuMemSetAccess_run_us", now_us() - t);
    put("cuMemSetAccess_run_result", access_run);
    t = now_us();
    const int unmap_run = result_of(cuMemUnmap(va, page * pages));
    put("cuMemUnmap_run_us", now_us() - t);
    put("cuMemUnmap_run_result", unmap_run);
    if (unmap_run == 0) mapped_again = 0;
  }
  for (int i = 0; i < pages && mapped_again > 0; ++i) cuMemUnmap(va + i * page, page);
  for (int i = 0; i < pages; ++i) {
    double t = now_us();
    failed |= result_of(cuMemRelease(handles[i]));
    release.push_back(now_us() - t);
  }
  cuMemAddressFree(va, page * pages);
  put("vmm_run_pages", pages);
  put("vmm_latency_pages", pages);
  put("vmm_latency_errors", failed);
  put("cuMemCreate_us", median(create));
  put("cuMemMap_us", median(map));
  put("cuMemSetAccess_us", median(set_access));
  put("cuMemUnmap_us", median(unmap));
  put("cuMemRelease_us", median(release));
}

// What pinning costs: median µs to create and release one host-located
// 2 MiB page (the host cache's pages; the sim's `host_create`), over 16.
void host_create_latency(CUmemLocationType type, int id) {
  const size_t page = 2 << 20;
  const int pages = 16;
  CUmemAllocationProp prop = prop_for(type, id);
  std::vector<CUmemGenericAllocationHandle> handles(pages);
  std::vector<double> create, release;
  int failed = 0;
  for (int i = 0; i < pages; ++i) {
    const double t = now_us();
    const int r = result_of(cuMemCreate(&handles[i], page, &prop, 0));
    const double took = now_us() - t;
    failed |= r;
    if (r != 0) {
      handles[i] = 0;
      continue;  // an error's return time says nothing of pinning
    }
    create.push_back(took);
  }
  for (int i = 0; i < pages; ++i) {
    if (handles[i] == 0) continue;
    const double t = now_us();
    failed |= result_of(cuMemRelease(handles[i]));
    release.push_back(now_us() - t);
  }
  put("host_create_location", type == CU_MEM_LOCATION_TYPE_HOST_NUMA ? "HOST_NUMA" : "HOST", true);
  put("host_create_errors", failed);
  put("cuMemCreate_host_us", median(create));  // -1: no page could be created
  put("cuMemRelease_host_us", median(release));
}

// What the preload's hot path pays the driver: mean ns per call, over many,
// of the calls a cached pair may make (route: cuCtxGetDevice and
// cuStreamIsCapturing; a device barrier: a record on the legacy stream; a
// fence: a record and a query).
void hot_driver_calls() {
  const int calls = 10000;
  CUevent event = nullptr;
  if (cuEventCreate(&event, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return;
  const auto mean_ns = [&](const auto& call) {
    for (int i = 0; i < 100; ++i) call();
    const double t = now_us();
    for (int i = 0; i < calls; ++i) call();
    return (now_us() - t) * 1000.0 / calls;
  };
  CUdevice device = 0;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CUcontext context = nullptr;
  // A call that fails would be timed as if it worked: each must succeed once.
  if (cuCtxGetDevice(&device) != CUDA_SUCCESS || cuCtxGetCurrent(&context) != CUDA_SUCCESS ||
      cuStreamIsCapturing(nullptr, &status) != CUDA_SUCCESS || cuEventRecord(event, nullptr) != CUDA_SUCCESS ||
      cuStreamWaitEvent(nullptr, event, 0) != CUDA_SUCCESS || cuEventSynchronize(event) != CUDA_SUCCESS ||
      cuEventQuery(event) != CUDA_SUCCESS) {
    put("hot_driver_calls_error", 1);
    cuEventDestroy(event);
    return;
  }
  put("cuCtxGetDevice_ns", mean_ns([&] { cuCtxGetDevice(&device); }));
  put("cuCtxGetCurrent_ns", mean_ns([&] { cuCtxGetCurrent(&context); }));
  put("cuStreamIsCapturing_legacy_ns", mean_ns([&] { cuStreamIsCapturing(nullptr, &status); }));
  put("cuEventRecord_legacy_ns", mean_ns([&] { cuEventRecord(event, nullptr); }));
  put("cuEventQuery_ns", mean_ns([&] { cuEventQuery(event); }));
  put("cuStreamWaitEvent_legacy_ns", mean_ns([&] { cuStreamWaitEvent(nullptr, event, 0); }));
  cuCtxSynchronize();
  cuEventDestroy(event);
}

void bandwidth() {
  const size_t n = 256 << 20;
  void *host = nullptr, *device = nullptr;
  CHECK(cudaMallocHost(&host, n));
  CHECK(cudaMalloc(&device, n));
  cudaStream_t s;
  cudaEvent_t a, b;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int dir = 0; dir < 2; ++dir) {
    std::vector<double> gbps;
    for (int rep = 0; rep < 6; ++rep) {
      CHECK(cudaEventRecord(a, s));
      if (dir == 0)
        CHECK(cudaMemcpyAsync(device, host, n, cudaMemcpyHostToDevice, s));
      else
        CHECK(cudaMemcpyAsync(host, device, n, cudaMemcpyDeviceToHost, s));
      CHECK(cudaEventRecord(b, s));
      CHECK(cudaEventSynchronize(b));
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, a, b));
      if (rep > 0) gbps.push_back(n / (ms * 1e6));
    }
    put(dir == 0 ? "pinned_htod_GBps" : "pinned_dtoh_GBps", median(gbps));
  }
  cudaFreeHost(host);
  cudaFree(device);
}

}  // namespace

int main() {
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS) {
    std::printf("{\"status\":\"no device\"}\n");
    return 1;
  }
  CHECK(cudaFree(nullptr));  // primary context current for the driver calls below
  int driver = 0, runtime = 0;
  cuDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  char name[256] = {};
  cuDeviceGetName(name, sizeof name, dev);
  size_t total = 0;
  cuDeviceTotalMem(&total, dev);
  put("device", name);
  put("driver_version", driver);
  put("runtime_version", runtime);
  put("compute_capability",
      std::to_string(attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)) + "." +
          std::to_string(attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)),
      true);
  put("total_bytes", static_cast<double>(total));
  put("vmm", attribute(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED));
  put("host_vmm", attribute(CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED));
  put("host_numa_vmm", attribute(CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED));
  const int numa = attribute(CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID);
  put("host_numa_id", numa);
  put("memory_pools", attribute(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED));
  CUmemAllocationProp prop = prop_for(CU_MEM_LOCATION_TYPE_DEVICE, 0);
  size_t gran = 0, rec = 0;
  cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  cuMemGetAllocationGranularity(&rec, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
  put("granularity", static_cast<double>(gran));
  put("granularity_recommended", static_cast<double>(rec));
  put("trial_host_result", trial(CU_MEM_LOCATION_TYPE_HOST, 0));
  put("trial_host_numa_result", trial(CU_MEM_LOCATION_TYPE_HOST_NUMA, numa < 0 ? 0 : numa));
  put("trial_double_map_result", double_map_trial());
  vmm_latencies();
  // Where the host cache pins (host_cache.cpp): HOST_NUMA with a known node,
  // else HOST.
  if (attribute(CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) == 1 && numa >= 0) {
    host_create_latency(CU_MEM_LOCATION_TYPE_HOST_NUMA, numa);
  } else {
    host_create_latency(CU_MEM_LOCATION_TYPE_HOST, 0);
  }
  hot_driver_calls();
  bandwidth();
  put("status", "ok");
  std::printf("%s}\n", json.c_str());
  return 0;
}
