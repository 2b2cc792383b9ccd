// Hot path: allocate/free pairs of cached sizes and of mixed sizes, on 1..N
// threads sharing one pool, each against a baseline in the same run: the
// driver's own cuMemAlloc/cuMemFree on the sim (what a program without a pool
// pays) with the same sizes and threads. A third set measures what recording
// a trace (`trace:`) costs a cached pair, against the untraced pair: with
// pairs back to back the ring stays full, so that is the writer's sustained
// rate; in bursts that fit the ring, the producers' cost alone. Each thread uses a stream of its own;
// blocks that pass between threads pay the pool's cross-stream wait. The 512 B pair also runs with
// every thread on one shared stream, the baseline the own-stream pairs are compared with.
// Target (issue 3): a cached-size pair under 100 ns median on one thread.
#include <benchmark/benchmark.h>

#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "bench_support.hpp"
#include "runtime/runtime.hpp"

namespace tidepool::bench {
namespace {

// Each run (one size and thread count) gets a fresh pool, made before its
// threads start, so no run inherits blocks another left on other streams.
struct Fixture {
  std::unique_ptr<runtime::TraceRecorder> recorder;
  std::unique_ptr<runtime::Allocator> allocator;
};
Fixture fixture;

void fresh_pool(const benchmark::State& /*state*/) { fixture.allocator = make_allocator("best_fit"); }

// Recording into /dev/null: the producers' cost and the writer's, no disk.
void fresh_traced_pool(const benchmark::State& /*state*/) {
  auto opened = runtime::TraceRecorder::open("/dev/null");
  if (!opened) {
    std::fprintf(stderr, "cannot open /dev/null for a trace: %s\n", opened.status().message());
    std::exit(1);
  }
  fixture.recorder = std::move(opened.value());
  fixture.allocator = make_allocator("best_fit", 0, fixture.recorder.get());
}

void drop_pool(const benchmark::State& /*state*/) {
  fixture.allocator.reset();
  fixture.recorder.reset();
}

std::string key(const char* what, const benchmark::State& state, bool with_size) {
  // Appended piecewise: `"/" + std::to_string(...)` trips GCC 12's
  // -Wrestrict false positive at -O3.
  std::string k = what;
  if (with_size) {
    k += '/';
    k += std::to_string(state.range(0));
  }
  k += "/threads:";
  k += std::to_string(state.threads());
  return k;
}

// 64 B .. 8 MiB, powers of two, the same sequence for every run.
std::vector<std::size_t> mixed_sizes(unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::size_t> sizes(1024);
  for (auto& s : sizes) s = std::size_t{1} << (6 + rng() % 18);
  return sizes;
}

// `shared_stream`: every thread on stream 0 rather than a stream of its own.
void pool_pairs(benchmark::State& state, runtime::Allocator& allocator, bool shared_stream = false) {
  const auto size = static_cast<std::size_t>(state.range(0));
  const std::uintptr_t s = stream(shared_stream ? 0 : state.thread_index());
  // Warm: the first pair maps the pages; later pairs reuse them.
  auto warm = allocator.allocate(size, s, true);
  if (!warm) {
    state.SkipWithError(warm.status().message());
    return;
  }
  (void)allocator.deallocate(warm.value(), s, true);
  for (auto _ : state) {
    auto r = allocator.allocate(size, s, true);
    if (!r) {
      state.SkipWithError(r.status().message());
      break;
    }
    benchmark::DoNotOptimize(r.value());
    (void)allocator.deallocate(r.value(), s, true);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_PoolPairCachedSize(benchmark::State& state) {
  pool_pairs(state, *fixture.allocator);
  std::string label =
      versus_label(key("driver_pair", state, true)) + " " + baseline_label(key("pool_pair", state, true));
  if (state.range(0) == 512) {
    label += ' ';  // not `" " + ...`: the -Wrestrict false positive again (see key())
    label += versus_label(key("shared_stream", state, true));
  }
  state.SetLabel(label);
}
BENCHMARK(BM_PoolPairCachedSize)
    ->Arg(512)
    ->Arg(64 << 10)
    ->Arg(8 << 20)
    ->Threads(1)
    ->Threads(2)
    ->Threads(4)
    ->Threads(8)
    ->UseRealTime()
    ->Setup(fresh_pool)
    ->Teardown(drop_pool);

// The 512 B pair with every thread on one stream: what the own-stream pairs
// are held to. Streams of their own must not cost threads more than half
// their rate (issue 9), however many streams the program uses.
void BM_PoolPairSharedStream(benchmark::State& state) {
  pool_pairs(state, *fixture.allocator, /*shared_stream=*/true);
  state.SetLabel(baseline_label(key("shared_stream", state, true)));
}
BENCHMARK(BM_PoolPairSharedStream)
    ->Arg(512)
    ->Threads(1)
    ->Threads(2)
    ->Threads(4)
    ->Threads(8)
    ->UseRealTime()
    ->Setup(fresh_pool)
    ->Teardown(drop_pool);

void BM_TracedPoolPairCachedSize(benchmark::State& state) {
  pool_pairs(state, *fixture.allocator);
  state.SetLabel(versus_label(key("pool_pair", state, true)));
}
BENCHMARK(BM_TracedPoolPairCachedSize)
    ->Arg(512)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime()
    ->Setup(fresh_traced_pool)
    ->Teardown(drop_pool);

// The producers' side alone: bursts of pairs that fit in the ring (half of
// it), timed by hand; the ring is drained between bursts, untimed. This is
// what tracing adds to an allocation while the writer keeps up.
void BM_TracedPoolPairBurst(benchmark::State& state) {
  runtime::Allocator& allocator = *fixture.allocator;
  const auto size = static_cast<std::size_t>(state.range(0));
  const std::uintptr_t s = stream(0);
  constexpr std::size_t kPairs = runtime::TraceRecorder::kCapacity / 4;
  auto warm = allocator.allocate(size, s, true);
  if (!warm) {
    state.SkipWithError(warm.status().message());
    return;
  }
  (void)allocator.deallocate(warm.value(), s, true);
  for (auto _ : state) {
    fixture.recorder->flush();
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < kPairs; ++i) {
      auto r = allocator.allocate(size, s, true);
      benchmark::DoNotOptimize(r);
      (void)allocator.deallocate(r.value(), s, true);
    }
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(kPairs));
  state.SetLabel(versus_label(key("pool_pair", state, true)));
}
BENCHMARK(BM_TracedPoolPairBurst)->Arg(512)->UseManualTime()->Setup(fresh_traced_pool)->Teardown(drop_pool);

void BM_DriverPair(benchmark::State& state) {
  const driver::Api& api = sim().api();
  use_primary_context();
  const auto size = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    CUdeviceptr p = 0;
    if (api.memAlloc(&p, size) != CUDA_SUCCESS) {
      state.SkipWithError("cuMemAlloc failed");
      break;
    }
    benchmark::DoNotOptimize(p);
    api.memFree(p);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(baseline_label(key("driver_pair", state, true)));
}
BENCHMARK(BM_DriverPair)->Arg(512)->Arg(64 << 10)->Arg(8 << 20)->Threads(1)->Threads(2)->Threads(4)->UseRealTime();

// Each thread keeps 64 blocks live and replaces one per step with a block of
// the next size, so most requests split or coalesce rather than hit a
// same-size cached block.
void BM_PoolMixedSizes(benchmark::State& state) {
  runtime::Allocator& allocator = *fixture.allocator;
  const std::uintptr_t s = stream(state.thread_index());
  const auto sizes = mixed_sizes(7 + static_cast<unsigned>(state.thread_index()));
  std::vector<std::uintptr_t> live(64, 0);
  std::size_t i = 0;
  for (auto _ : state) {
    std::uintptr_t& slot = live[i % live.size()];
    if (slot != 0) (void)allocator.deallocate(slot, s, true);
    auto r = allocator.allocate(sizes[i % sizes.size()], s, true);
    if (!r) {
      state.SkipWithError(r.status().message());
      slot = 0;
      break;
    }
    slot = r.value();
    ++i;
  }
  for (auto p : live) {
    if (p != 0) (void)allocator.deallocate(p, s, true);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(versus_label(key("driver_mixed", state, false)));
}
BENCHMARK(BM_PoolMixedSizes)->Threads(1)->Threads(2)->Threads(4)->UseRealTime()->Setup(fresh_pool)->Teardown(drop_pool);

void BM_DriverMixedSizes(benchmark::State& state) {
  const driver::Api& api = sim().api();
  use_primary_context();
  const auto sizes = mixed_sizes(7 + static_cast<unsigned>(state.thread_index()));
  std::vector<CUdeviceptr> live(64, 0);
  std::size_t i = 0;
  for (auto _ : state) {
    CUdeviceptr& slot = live[i % live.size()];
    if (slot != 0) api.memFree(slot);
    if (api.memAlloc(&slot, sizes[i % sizes.size()]) != CUDA_SUCCESS) {
      state.SkipWithError("cuMemAlloc failed");
      slot = 0;
      break;
    }
    ++i;
  }
  for (auto p : live) {
    if (p != 0) api.memFree(p);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(baseline_label(key("driver_mixed", state, false)));
}
BENCHMARK(BM_DriverMixedSizes)->Threads(1)->Threads(2)->Threads(4)->UseRealTime();

}  // namespace
}  // namespace tidepool::bench

int main(int argc, char** argv) { return tidepool::bench::run_benchmarks(argc, argv); }
