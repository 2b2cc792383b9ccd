// Random allocations, after RMM's random_allocations benchmark: a fixed
// number of allocations with sizes drawn uniformly from [1, max_size],
// interleaved with frees of randomly chosen live blocks, under a cap on the
// bytes live at once. At each step the workload allocates when it still has
// allocations to make and either a coin says so or nothing is live (or it
// frees when the next size would pass the cap); otherwise it frees a random
// live block. The sequence depends only on the seed, so every target sees
// the same requests in the same order.
//
// Targets: tidepool's placement policies, each against a baseline in the
// same run that makes the same calls on the sim driver (cuMemAlloc and
// cuMemFree). Items are allocate and free calls.
#include <benchmark/benchmark.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "bench_support.hpp"
#include "pool/pool.hpp"

namespace tidepool::bench {
namespace {

constexpr std::size_t kMaxLiveBytes = std::size_t{4} << 30;  // the cap on bytes live at once

// One step of the workload: allocate `size` (> 0) or free live block `index`.
struct Step {
  std::size_t size;
  std::size_t index;
};

std::vector<Step> make_workload(std::size_t allocations, std::size_t max_size, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::size_t> size_of(1, max_size);
  std::bernoulli_distribution coin(0.5);
  std::vector<Step> steps;
  std::vector<std::size_t> live_sizes;
  std::size_t live_bytes = 0;
  std::size_t made = 0;
  std::size_t next_size = size_of(rng);
  while (made < allocations || !live_sizes.empty()) {
    const bool room = live_bytes + next_size <= kMaxLiveBytes;
    if (made < allocations && room && (live_sizes.empty() || coin(rng))) {
      steps.push_back({next_size, 0});
      live_sizes.push_back(next_size);
      live_bytes += next_size;
      ++made;
      next_size = size_of(rng);
    } else {
      const std::size_t index = std::uniform_int_distribution<std::size_t>(0, live_sizes.size() - 1)(rng);
      steps.push_back({0, index});
      live_bytes -= live_sizes[index];
      live_sizes[index] = live_sizes.back();
      live_sizes.pop_back();
    }
  }
  return steps;
}

const std::vector<Step>& workload(std::size_t allocations, std::size_t max_size) {
  static std::map<std::pair<std::size_t, std::size_t>, std::vector<Step>> cache;
  auto& steps = cache[{allocations, max_size}];
  if (steps.empty()) steps = make_workload(allocations, max_size, 1234);
  return steps;
}

// Runs the workload once through `allocate` and `release`; false on a failed allocation.
template <typename Allocate, typename Release>
bool run_workload(const std::vector<Step>& steps, std::vector<std::uintptr_t>& live, Allocate&& allocate,
                  Release&& release) {
  for (const Step& step : steps) {
    if (step.size != 0) {
      const std::uintptr_t p = allocate(step.size);
      if (p == 0) return false;
      live.push_back(p);
    } else {
      release(live[step.index]);
      live[step.index] = live.back();
      live.pop_back();
    }
  }
  return true;
}

std::string key(const benchmark::State& state) {
  return "driver/random/" + std::to_string(state.range(0)) + "/" + std::to_string(state.range(1) >> 10) + "KiB";
}

void BM_RandomAllocationsDriver(benchmark::State& state) {
  const auto& steps = workload(static_cast<std::size_t>(state.range(0)), static_cast<std::size_t>(state.range(1)));
  const driver::Api& api = sim().api();
  use_primary_context();
  std::vector<std::uintptr_t> live;
  for (auto _ : state) {
    const bool ok = run_workload(
        steps, live,
        [&](std::size_t size) -> std::uintptr_t {
          CUdeviceptr p = 0;
          return api.memAlloc(&p, size) == CUDA_SUCCESS ? p : 0;
        },
        [&](std::uintptr_t p) { api.memFree(p); });
    if (!ok) {
      state.SkipWithError("cuMemAlloc failed");
      break;
    }
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(steps.size()));
  state.SetLabel(baseline_label(key(state)));
}

void BM_RandomAllocations(benchmark::State& state, const std::string& policy) {
  const auto& steps = workload(static_cast<std::size_t>(state.range(0)), static_cast<std::size_t>(state.range(1)));
  auto allocator = make_allocator(policy);
  std::vector<std::uintptr_t> live;
  for (auto _ : state) {
    const bool ok = run_workload(
        steps, live,
        [&](std::size_t size) -> std::uintptr_t {
          auto r = allocator->allocate(size, 0, false);
          return r ? r.value() : 0;
        },
        [&](std::uintptr_t p) { (void)allocator->deallocate(p, 0, false); });
    if (!ok) {
      state.SkipWithError("an allocation failed");
      break;
    }
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(steps.size()));
  state.SetLabel(versus_label(key(state)));
}

// (allocations, max size): a mix across both arenas, small blocks only, and
// large blocks mostly.
void workloads(benchmark::internal::Benchmark* b) {
  b->Args({1000, 4 << 20})->Args({10000, 64 << 10})->Args({1000, 64 << 20});
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}

BENCHMARK(BM_RandomAllocationsDriver)->Apply(workloads);

}  // namespace
}  // namespace tidepool::bench

int main(int argc, char** argv) {
  using namespace tidepool;  // NOLINT(google-build-using-namespace): a benchmark's main
  for (std::string_view p : pool::policy_names()) {
    const std::string policy(p);
    benchmark::RegisterBenchmark(("BM_RandomAllocations/" + policy).c_str(), bench::BM_RandomAllocations, policy)
        ->Apply(bench::workloads);
  }
  return bench::run_benchmarks(argc, argv);
}
