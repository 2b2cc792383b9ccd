// gpu/hotpath.cu: the hot path in C, as one JSON line of nanoseconds per
// allocate/free pair of cached sizes (512 B to 8 MiB, each size warmed first):
//   cudaMalloc/cudaFree (under the preload: tidepool through its hooks),
//   cudaMallocAsync/cudaFreeAsync on the default pool, release threshold max,
//   tidepool's C API (tidepool_malloc/tidepool_free), dlopened from the path
//   in $TIDEPOOL_LIBRARY when set and no preload is active;
//   cuMemAlloc_v2/cuMemFree_v2 found with dlsym (under the preload: its
//   hooks), the cudaFree-style pair without cudart's own share.
// The cudaMalloc and cuMemAlloc pairs run before any stream exists, then
// the cudaMalloc pair again after one does (cudaMalloc_with_stream_ns).
// run.sh runs it twice, native and preloaded; hotpath.py adds PyTorch.
#define PROGRAM "hotpath"
#include <cuda.h>
#include <dlfcn.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common.cuh"

namespace {

const size_t kSizes[] = {512, 4096, 65536, 1 << 20, 8 << 20};
const int kIters = 20000;

template <typename Alloc, typename Free>
double ns_per_pair(Alloc alloc, Free release) {
  void* warm[5];
  for (int i = 0; i < 5; ++i) warm[i] = alloc(kSizes[i]);
  for (int i = 0; i < 5; ++i) release(warm[i]);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kIters; ++i) release(alloc(kSizes[i % 5]));
  const auto stop = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(stop - start).count() / kIters;
}

double cuda_malloc_pair_ns() {
  return ns_per_pair(
      [](size_t n) {
        void* p;
        CHECK(cudaMalloc(&p, n));
        return p;
      },
      [](void* p) { CHECK(cudaFree(p)); });
}

}  // namespace

int main() {
  std::string json = "{";
  CHECK(cudaFree(nullptr));
  json += "\"cudaMalloc_ns\":" + std::to_string(cuda_malloc_pair_ns());

  // Before any stream exists, as the cudaMalloc pairs above.
  if (void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    using Alloc = CUresult (*)(CUdeviceptr*, size_t);
    using Release = CUresult (*)(CUdeviceptr);
    static Alloc mem_alloc = reinterpret_cast<Alloc>(dlsym(driver, "cuMemAlloc_v2"));
    static Release mem_free = reinterpret_cast<Release>(dlsym(driver, "cuMemFree_v2"));
    if (mem_alloc != nullptr && mem_free != nullptr) {
      json += ",\"cuMemAlloc_ns\":" + std::to_string(ns_per_pair(
                                          [](size_t n) {
                                            CUdeviceptr p = 0;
                                            if (mem_alloc(&p, n) != CUDA_SUCCESS) std::exit(3);
                                            return reinterpret_cast<void*>(p);
                                          },
                                          [](void* p) {
                                            if (mem_free(reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS)
                                              std::exit(3);
                                          }));
    }
  }

  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  // The cudaMalloc pair again once a stream exists: under the preload, the
  // legacy stream's order no longer puts frees back, a queued barrier does.
  json += ",\"cudaMalloc_with_stream_ns\":" + std::to_string(cuda_malloc_pair_ns());
  cudaMemPool_t pool;
  CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
  uint64_t threshold = UINT64_MAX;
  CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  json += ",\"cudaMallocAsync_ns\":" + std::to_string(ns_per_pair(
                                           [s](size_t n) {
                                             void* p;
                                             CHECK(cudaMallocAsync(&p, n, s));
                                             return p;
                                           },
                                           [s](void* p) { CHECK(cudaFreeAsync(p, s)); }));
  CHECK(cudaStreamSynchronize(s));

  const char* preload = std::getenv("LD_PRELOAD");
  const char* library = std::getenv("TIDEPOOL_LIBRARY");
  if ((preload == nullptr || *preload == '\0') && library != nullptr && *library != '\0') {
    void* lib = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    using Malloc = int (*)(void**, size_t, int);
    using Free = int (*)(void*);
    static Malloc tp_malloc = lib ? reinterpret_cast<Malloc>(dlsym(lib, "tidepool_malloc")) : nullptr;
    static Free tp_free = lib ? reinterpret_cast<Free>(dlsym(lib, "tidepool_free")) : nullptr;
    if (tp_malloc != nullptr && tp_free != nullptr) {
      json += ",\"tidepool_capi_ns\":" + std::to_string(ns_per_pair(
                                             [](size_t n) {
                                               void* p = nullptr;
                                               if (tp_malloc(&p, n, 0) != 0) std::exit(3);
                                               return p;
                                             },
                                             [](void* p) {
                                               if (tp_free(p) != 0) std::exit(3);
                                             }));
    } else {
      json += ",\"tidepool_capi_error\":\"cannot load " + std::string(library) + "\"";
    }
  }
  std::printf("%s,\"preloaded\":%s}\n", json.c_str(), preload && *preload ? "true" : "false");
  return 0;
}
