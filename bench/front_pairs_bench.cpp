// Front paths: a cached allocate/free pair as users reach it, through
// libtidepool.so itself rather than the core. The library is dlopen'd with the
// sim as its driver (TIDEPOOL_CUDA_LIB), and each pair goes through
//   - the C API: tidepool_malloc_async/tidepool_free_async on one stream, and
//     tidepool_malloc/tidepool_free (cudaFree semantics);
//   - the preload hooks: the exported cuMemAllocAsync/cuMemFreeAsync and
//     cuMemAlloc_v2/cuMemFree_v2, which is what a preloaded program calls.
// The baseline is the sim driver's own cuMemAlloc/cuMemFree pair.
// Figures: ns per pair (Google Benchmark's time per iteration).
#include <benchmark/benchmark.h>
#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string>

#include "bench_support.hpp"

namespace tidepool::bench {
namespace {

struct Front {
  using MallocAsync = int (*)(void**, std::size_t, int, void*);
  using FreeAsync = int (*)(void*, void*);
  using Malloc = int (*)(void**, std::size_t, int);
  using Free = int (*)(void*);
  using AllocAsync = CUresult (*)(CUdeviceptr*, std::size_t, CUstream);
  using FreeAsyncDriver = CUresult (*)(CUdeviceptr, CUstream);
  using Alloc = CUresult (*)(CUdeviceptr*, std::size_t);
  using FreeDriver = CUresult (*)(CUdeviceptr);
  using StreamCreate = CUresult (*)(CUstream*, unsigned int);
  MallocAsync malloc_async = nullptr;
  FreeAsync free_async = nullptr;
  Malloc malloc = nullptr;
  Free free = nullptr;
  AllocAsync hook_alloc_async = nullptr;
  FreeAsyncDriver hook_free_async = nullptr;
  Alloc hook_alloc = nullptr;
  FreeDriver hook_free = nullptr;
  StreamCreate hook_stream_create = nullptr;
};

template <typename F>
F symbol(void* handle, const char* name) {
  void* p = dlsym(handle, name);
  if (p == nullptr) {
    std::fprintf(stderr, "libtidepool.so has no %s\n", name);
    std::exit(1);
  }
  return reinterpret_cast<F>(p);
}

const Front& front() {
  static const Front f = [] {
    setenv("TIDEPOOL_CUDA_LIB", TIDEPOOL_SIM_LIBRARY, 1);
    unsetenv("TIDEPOOL_CONF");
    use_primary_context();
    void* handle = dlopen(TIDEPOOL_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      std::fprintf(stderr, "cannot open libtidepool.so: %s\n", dlerror());
      std::exit(1);
    }
    Front r;
    r.malloc_async = symbol<Front::MallocAsync>(handle, "tidepool_malloc_async");
    r.free_async = symbol<Front::FreeAsync>(handle, "tidepool_free_async");
    r.malloc = symbol<Front::Malloc>(handle, "tidepool_malloc");
    r.free = symbol<Front::Free>(handle, "tidepool_free");
    r.hook_alloc_async = symbol<Front::AllocAsync>(handle, "cuMemAllocAsync");
    r.hook_free_async = symbol<Front::FreeAsyncDriver>(handle, "cuMemFreeAsync");
    r.hook_alloc = symbol<Front::Alloc>(handle, "cuMemAlloc_v2");
    r.hook_free = symbol<Front::FreeDriver>(handle, "cuMemFree_v2");
    r.hook_stream_create = symbol<Front::StreamCreate>(handle, "cuStreamCreate");
    return r;
  }();
  return f;
}

// Runs pairs of `allocate` (returns the pointer, or 0 on failure) and
// `release` until the state stops, labelled for the ratio table.
template <typename Allocate, typename Release>
void pairs(benchmark::State& state, const char* what, const std::string& label, Allocate allocate, Release release) {
  for (auto _ : state) {
    const std::uintptr_t p = allocate();
    if (p == 0) {
      state.SkipWithError(what);
      break;
    }
    benchmark::DoNotOptimize(p);
    release(p);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(label);
}

// The sim's own pair: what the program pays without tidepool. First, before
// the pool under test holds any of the sim's memory.
void BM_DriverPair(benchmark::State& state) {
  use_primary_context();
  const driver::Api& api = sim().api();
  pairs(
      state, "the sim's cuMemAlloc failed", baseline_label("driver_pair"),
      [&] {
        CUdeviceptr p = 0;
        return api.memAlloc(&p, 512) == CUDA_SUCCESS ? static_cast<std::uintptr_t>(p) : 0;
      },
      [&](std::uintptr_t p) { (void)api.memFree(p); });
}
BENCHMARK(BM_DriverPair);

void BM_CApiStreamPair(benchmark::State& state) {
  const Front& f = front();
  void* s = reinterpret_cast<void*>(stream(0));
  const auto size = static_cast<std::size_t>(state.range(0));
  pairs(
      state, "tidepool_malloc_async failed", versus_label("driver_pair"),
      [&] {
        void* p = nullptr;
        return f.malloc_async(&p, size, 0, s) == 0 ? reinterpret_cast<std::uintptr_t>(p) : 0;
      },
      [&](std::uintptr_t p) { (void)f.free_async(reinterpret_cast<void*>(p), s); });
}
BENCHMARK(BM_CApiStreamPair)->Arg(512)->Arg(8 << 20);

void BM_CApiDevicePair(benchmark::State& state) {
  const Front& f = front();
  const auto size = static_cast<std::size_t>(state.range(0));
  pairs(
      state, "tidepool_malloc failed", versus_label("driver_pair"),
      [&] {
        void* p = nullptr;
        return f.malloc(&p, size, 0) == 0 ? reinterpret_cast<std::uintptr_t>(p) : 0;
      },
      [&](std::uintptr_t p) { (void)f.free(reinterpret_cast<void*>(p)); });
}
BENCHMARK(BM_CApiDevicePair)->Arg(512)->Arg(8 << 20);

void BM_PreloadStreamPair(benchmark::State& state) {
  const Front& f = front();
  auto s = reinterpret_cast<CUstream>(stream(0));
  const auto size = static_cast<std::size_t>(state.range(0));
  pairs(
      state, "cuMemAllocAsync hook failed", versus_label("driver_pair"),
      [&] {
        CUdeviceptr p = 0;
        return f.hook_alloc_async(&p, size, s) == CUDA_SUCCESS ? static_cast<std::uintptr_t>(p) : 0;
      },
      [&](std::uintptr_t p) { (void)f.hook_free_async(p, s); });
}
BENCHMARK(BM_PreloadStreamPair)->Arg(512)->Arg(8 << 20);

void BM_PreloadDevicePair(benchmark::State& state) {
  const Front& f = front();
  const auto size = static_cast<std::size_t>(state.range(0));
  pairs(
      state, "cuMemAlloc_v2 hook failed", versus_label("driver_pair"),
      [&] {
        CUdeviceptr p = 0;
        return f.hook_alloc(&p, size) == CUDA_SUCCESS ? static_cast<std::uintptr_t>(p) : 0;
      },
      [&](std::uintptr_t p) { (void)f.hook_free(p); });
}
BENCHMARK(BM_PreloadDevicePair)->Arg(512)->Arg(8 << 20);

// cudaFree-style pairs once the program has a non-blocking stream made
// through the hooks, as a framework's side stream is: every free waits for a
// device barrier, which stands on the last one while no stream queued work.
// The sizes cycle as in gpu/hotpath.cu, so a request seldom finds its own
// block freed just before. Registered last: the stream stays.
void BM_PreloadDevicePairFollowedStream(benchmark::State& state) {
  const Front& f = front();
  static const CUstream side = [&] {
    use_primary_context();
    CUstream s = nullptr;
    if (f.hook_stream_create(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
      std::fprintf(stderr, "cuStreamCreate hook failed\n");
      std::exit(1);
    }
    return s;
  }();
  benchmark::DoNotOptimize(side);
  constexpr std::size_t kSizes[] = {512, 4096, 65536, 1 << 20, 8 << 20};
  std::size_t next = 0;
  pairs(
      state, "cuMemAlloc_v2 hook failed", versus_label("driver_pair"),
      [&] {
        CUdeviceptr p = 0;
        const std::size_t size = kSizes[next];
        next = (next + 1) % std::size(kSizes);
        return f.hook_alloc(&p, size) == CUDA_SUCCESS ? static_cast<std::uintptr_t>(p) : 0;
      },
      [&](std::uintptr_t p) { (void)f.hook_free(p); });
}
BENCHMARK(BM_PreloadDevicePairFollowedStream);

}  // namespace
}  // namespace tidepool::bench

int main(int argc, char** argv) { return tidepool::bench::run_benchmarks(argc, argv); }
