// Cached allocate/free pairs through the preload, for counting instructions:
// bench/pair_instructions.py runs this under callgrind with
// LD_PRELOAD=libtidepool.so (the sim as libcuda.so.1) and collects only
// inside measured_pairs(), so that the figure per pair repeats exactly.
//
// usage: bench_pair_instructions MODE PAIRS [--calls]
//   device         cuMemAlloc_v2/cuMemFree_v2 before any stream exists
//   device_stream  the same once a non-blocking stream was made (through
//                  the hooks, as a framework's side stream is)
//   async          cuMemAllocAsync/cuMemFreeAsync on that stream
// The sizes cycle as in gpu/hotpath.cu; every size is allocated and freed
// four times before the measured pairs, so that each is cached. --calls
// prints, as one JSON object, how many times the measured pairs called each
// driver entry point a cached pair could reach (the sim's own counts):
// tests/interpose/pair_driver_calls_test.py holds them to the hot path's.
#include <cuda.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>

extern "C" uint64_t tidepool_sim_call_count(const char* name);  // the sim's (sim/sim_control.h)

namespace {

// Every entry point a pair might reach: the current context and device,
// the capture check, fences and host waits, and VMM.
constexpr const char* kCounted[] = {
    "cuCtxGetCurrent", "cuCtxSetCurrent",   "cuCtxGetDevice",     "cuStreamIsCapturing", "cuEventQuery",
    "cuEventRecord",   "cuStreamWaitEvent", "cuEventSynchronize", "cuStreamSynchronize", "cuCtxSynchronize",
    "cuMemCreate",     "cuMemRelease",      "cuMemMap",           "cuMemUnmap",          "cuMemSetAccess"};

constexpr std::size_t kSizes[] = {512, 4096, 65536, 1 << 20, 8 << 20};

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "bench_pair_instructions: %s failed\n", what);
  std::exit(1);
}

bool pair(std::size_t size, CUstream stream, bool async) {
  CUdeviceptr p = 0;
  if (async) return cuMemAllocAsync(&p, size, stream) == CUDA_SUCCESS && cuMemFreeAsync(p, stream) == CUDA_SUCCESS;
  return cuMemAlloc(&p, size) == CUDA_SUCCESS && cuMemFree(p) == CUDA_SUCCESS;
}

// Out of line and named: callgrind's --toggle-collect takes it by name.
[[gnu::noinline]] bool measured_pairs(long pairs, CUstream stream, bool async) {
  bool ok = true;
  for (long i = 0; i < pairs; ++i) ok = pair(kSizes[i % std::size(kSizes)], stream, async) && ok;
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const long pairs = argc > 2 ? std::strtol(argv[2], nullptr, 10) : 0;
  const bool calls = argc == 4 && std::strcmp(argv[3], "--calls") == 0;
  if ((argc != 3 && !calls) || (mode != "device" && mode != "device_stream" && mode != "async") || pairs <= 0) {
    std::fprintf(stderr, "usage: %s device|device_stream|async PAIRS [--calls]\n", argv[0]);
    return 2;
  }
  CUdevice device = 0;
  CUcontext context = nullptr;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&device, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&context, device) != CUDA_SUCCESS || cuCtxSetCurrent(context) != CUDA_SUCCESS) {
    fail("making device 0's primary context current");
  }
  CUstream stream = nullptr;
  if (mode != "device" && cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) fail("cuStreamCreate");
  const bool async = mode == "async";
  if (!measured_pairs(static_cast<long>(std::size(kSizes)) * 4, stream, async)) fail("a warm-up pair");
  uint64_t before[std::size(kCounted)];
  for (std::size_t i = 0; i < std::size(kCounted); ++i) before[i] = tidepool_sim_call_count(kCounted[i]);
  if (!measured_pairs(pairs, stream, async)) fail("a measured pair");
  uint64_t made[std::size(kCounted)];
  for (std::size_t i = 0; i < std::size(kCounted); ++i) made[i] = tidepool_sim_call_count(kCounted[i]) - before[i];
  if (stream != nullptr && cuStreamSynchronize(stream) != CUDA_SUCCESS) fail("cuStreamSynchronize");
  if (!calls) {
    std::printf("%s %ld pairs\n", mode.c_str(), pairs);
    return 0;
  }
  std::printf("{\"mode\":\"%s\",\"pairs\":%ld,\"calls\":{", mode.c_str(), pairs);
  for (std::size_t i = 0; i < std::size(kCounted); ++i) {
    std::printf("%s\"%s\":%llu", i == 0 ? "" : ",", kCounted[i], static_cast<unsigned long long>(made[i]));
  }
  std::printf("}}\n");
  return 0;
}
