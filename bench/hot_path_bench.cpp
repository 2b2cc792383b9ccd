// Hot path: allocate/free pairs of cached sizes, mixed sizes, and 1..N
// threads, each against a baseline in the same run: the driver's own
// cuMemAlloc/cuMemFree on the sim (what a program without a pool pays).
// Target (issue 3): a cached-size pair under 100 ns median on one thread.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "bench_support.hpp"

namespace tidepool::bench {
namespace {

runtime::Allocator& shared_allocator() {
  static auto allocator = make_allocator("best_fit");
  return *allocator;
}

void BM_PoolPairCachedSize(benchmark::State& state) {
  runtime::Allocator& allocator = shared_allocator();
  const auto size = static_cast<std::size_t>(state.range(0));
  // Warm: the first pair maps the pages; later pairs reuse them.
  const std::uintptr_t stream = 0x1000 + static_cast<std::uintptr_t>(state.thread_index());
  auto warm = allocator.allocate(size, stream, true);
  (void)allocator.deallocate(warm.value(), stream, true);
  for (auto _ : state) {
    auto r = allocator.allocate(size, stream, true);
    benchmark::DoNotOptimize(r);
    (void)allocator.deallocate(r.value(), stream, true);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PoolPairCachedSize)->Arg(512)->Arg(64 << 10)->Arg(8 << 20)->Threads(1)->Threads(2)->Threads(4)->UseRealTime();

void BM_DriverPair(benchmark::State& state) {
  const driver::Api& api = sim().api();
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  api.init(0);
  api.deviceGet(&dev, 0);
  api.devicePrimaryCtxRetain(&ctx, dev);
  api.ctxSetCurrent(ctx);
  const auto size = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    CUdeviceptr p = 0;
    api.memAlloc(&p, size);
    benchmark::DoNotOptimize(p);
    api.memFree(p);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DriverPair)->Arg(512)->Arg(64 << 10)->Arg(8 << 20)->UseRealTime();

void BM_PoolMixedSizes(benchmark::State& state) {
  runtime::Allocator& allocator = shared_allocator();
  std::mt19937 rng(7);
  std::vector<std::size_t> sizes(1024);
  for (auto& s : sizes) s = std::size_t{1} << (6 + rng() % 18);  // 64 B .. 8 MiB
  std::vector<std::uintptr_t> live(64, 0);
  std::size_t i = 0;
  for (auto _ : state) {
    std::uintptr_t& slot = live[i % live.size()];
    if (slot != 0) (void)allocator.deallocate(slot, 0, true);
    slot = allocator.allocate(sizes[i % sizes.size()], 0, true).value();
    ++i;
  }
  for (auto p : live) {
    if (p != 0) (void)allocator.deallocate(p, 0, true);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PoolMixedSizes)->UseRealTime();

}  // namespace
}  // namespace tidepool::bench

BENCHMARK_MAIN();
