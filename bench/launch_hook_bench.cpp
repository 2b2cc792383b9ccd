// Launch hooks: what prefetch:launch adds to a kernel launch, on the path a
// preloaded program takes. libtidepool.so is dlopen'd with the sim as its
// driver and TIDEPOOL_CONF="evict:on,prefetch:launch", and a launch goes
// through its exported cuLaunchKernel, which scans every aligned word of the
// arguments against the pool before calling the sim's. The baseline is the
// sim's own cuLaunchKernel with the same arguments, in the same run.
//
// Kernels (a no-op registered with the sim; only the launch is timed):
//   scalars        six 8-byte arguments, none a pool pointer;
//   pool_pointers  three pool blocks on the device, three scalars;
//   struct         a 128-byte struct by value holding two pool pointers.
// No block is on the host, so nothing moves: this is the cost every launch
// pays. The bound is 100 ns more per launch with no pool pointer on
// the host. The stream is held by a kernel that waits for a flag, so a
// launch only queues its work (the sim's worker thread does not wake per
// launch, which would time the scheduler); every 1000 launches the flag
// opens, the stream drains and a new holder is queued, in both runs alike.
//
// Figures: ns per launch (time per iteration), and the ratio table's extra
// ns per launch over the baseline; BM_HookExtra_* time the two in pairs of
// batches (see paired()), whose extra_ns is the figure to quote.
#include <benchmark/benchmark.h>
#include <cuda.h>
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_support.hpp"
#include "sim/sim_control.h"

namespace tidepool::bench {
namespace {

using Launch = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                            void**, void**);
using Alloc = CUresult (*)(CUdeviceptr*, std::size_t);

void nothing(void** /*params*/, void* /*user*/) {}

// Blocks (a futex wait, not a spin): on a small machine a spinning stream
// worker would take a core from the launching thread.
void hold_until_open(void** params, void* /*user*/) {
  const auto* open = *static_cast<std::atomic<bool>**>(params[0]);
  open->wait(false, std::memory_order_acquire);
}

struct Setup {
  Launch hooked = nullptr;
  Launch direct = nullptr;
  CUfunction scalars = nullptr;        // 6 x 8 bytes
  CUfunction pool_pointers = nullptr;  // 6 x 8 bytes
  CUfunction by_value = nullptr;       // one 128-byte struct
  CUfunction holder = nullptr;
  std::array<CUdeviceptr, 3> blocks{};
  CUstream stream = nullptr;
};

template <typename F>
F symbol(void* handle, const char* name, const char* library) {
  void* p = dlsym(handle, name);
  if (p == nullptr) {
    std::fprintf(stderr, "%s has no %s\n", library, name);
    std::exit(1);
  }
  return reinterpret_cast<F>(p);
}

CUfunction register_kernel(void* sim_handle, std::size_t count, const std::size_t* sizes) {
  auto reg = symbol<decltype(&tidepool_sim_register_kernel)>(sim_handle, "tidepool_sim_register_kernel", "the sim");
  CUfunction f = nullptr;
  if (reg(&f, &nothing, nullptr, count, sizes) != CUDA_SUCCESS) {
    std::fprintf(stderr, "cannot register a kernel with the sim\n");
    std::exit(1);
  }
  return f;
}

const Setup& setup() {
  static const Setup s = [] {
    setenv("TIDEPOOL_CUDA_LIB", TIDEPOOL_SIM_LIBRARY, 1);
    setenv("TIDEPOOL_CONF", "evict:on,prefetch:launch,device_limit:1GiB,log:error", 1);
    use_primary_context();
    void* library = dlopen(TIDEPOOL_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      std::fprintf(stderr, "cannot open libtidepool.so: %s\n", dlerror());
      std::exit(1);
    }
    void* sim_handle = dlopen(TIDEPOOL_SIM_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (sim_handle == nullptr) {
      std::fprintf(stderr, "cannot open the sim: %s\n", dlerror());
      std::exit(1);
    }
    Setup r;
    r.hooked = symbol<Launch>(library, "cuLaunchKernel", "libtidepool.so");
    r.direct = symbol<Launch>(sim_handle, "cuLaunchKernel", "the sim");
    const std::size_t words[] = {8, 8, 8, 8, 8, 8};
    r.scalars = register_kernel(sim_handle, 6, words);
    r.pool_pointers = register_kernel(sim_handle, 6, words);
    const std::size_t one_struct[] = {128};
    r.by_value = register_kernel(sim_handle, 1, one_struct);
    const std::size_t one_pointer[] = {sizeof(void*)};
    auto reg = symbol<decltype(&tidepool_sim_register_kernel)>(sim_handle, "tidepool_sim_register_kernel", "the sim");
    if (reg(&r.holder, &hold_until_open, nullptr, 1, one_pointer) != CUDA_SUCCESS) std::exit(1);
    auto alloc = symbol<Alloc>(library, "cuMemAlloc_v2", "libtidepool.so");
    for (CUdeviceptr& b : r.blocks) {
      if (alloc(&b, 4 << 20) != CUDA_SUCCESS) {
        std::fprintf(stderr, "cuMemAlloc_v2 through libtidepool.so failed\n");
        std::exit(1);
      }
    }
    r.stream = reinterpret_cast<CUstream>(stream(0));
    return r;
  }();
  return s;
}

enum class Arguments { scalars, pool_pointers, by_value };

// One kind of launch, its arguments in place, and the stream held by a
// kernel that waits for a flag (hold/drain).
class LaunchSetup {
 public:
  LaunchSetup(const LaunchSetup&) = delete;
  LaunchSetup& operator=(const LaunchSetup&) = delete;
  explicit LaunchSetup(Arguments arguments) : s_(setup()) {
    for (std::size_t i = 0; i < scalars_.size(); ++i) scalars_[i] = i + 1;
    mixed_ = {s_.blocks[0], 7, s_.blocks[1], 8, s_.blocks[2] + 4096, 9};
    record_[3] = s_.blocks[0];
    record_[11] = s_.blocks[1] + 64;
    switch (arguments) {
      case Arguments::scalars:
        for (std::size_t i = 0; i < params_.size(); ++i) params_[i] = &scalars_[i];
        break;
      case Arguments::pool_pointers:
        function_ = s_.pool_pointers;
        for (std::size_t i = 0; i < params_.size(); ++i) params_[i] = &mixed_[i];
        break;
      case Arguments::by_value:
        function_ = s_.by_value;
        params_[0] = record_.data();
        break;
    }
    hold();
  }
  ~LaunchSetup() { drain(); }
  bool launch(bool hooked) {
    return (hooked ? s_.hooked : s_.direct)(function_, 1, 1, 1, 1, 1, 1, 0, s_.stream, params_.data(), nullptr) ==
           CUDA_SUCCESS;
  }
  // Every kLaunchesHeld launches, outside any timing: the queued work runs
  // and a new holder is queued.
  void count_launch() {
    if (++launched_ % kLaunchesHeld != 0) return;
    drain();
    hold();
  }

 private:
  // Fewer than a sim stream holds queued (1024, TIDEPOOL_SIM_QUEUE_DEPTH),
  // the holder included: one more would wait for room behind the holder,
  // which only this thread opens.
  static constexpr std::size_t kLaunchesHeld = 1000;
  void hold() {
    open_.store(false, std::memory_order_relaxed);
    (void)s_.direct(s_.holder, 1, 1, 1, 1, 1, 1, 0, s_.stream, holder_params_.data(), nullptr);
  }
  void drain() {
    open_.store(true, std::memory_order_release);
    open_.notify_all();
    (void)sim().api().streamSynchronize(s_.stream);
  }
  const Setup& s_;
  CUfunction function_ = s_.scalars;
  std::array<std::uint64_t, 6> scalars_{};
  std::array<std::uint64_t, 6> mixed_{};
  std::array<std::uint64_t, 16> record_{};
  std::array<void*, 6> params_{};
  std::atomic<bool> open_{false};
  std::atomic<bool>* flag_ = &open_;
  std::array<void*, 1> holder_params_{&flag_};
  std::size_t launched_ = 0;
};

const char* launch_key(Arguments arguments) {
  static const char* const keys[] = {"launch_scalars", "launch_pool_pointers", "launch_struct"};
  return keys[static_cast<int>(arguments)];
}

void launches(benchmark::State& state, Arguments arguments, bool hooked) {
  {
    LaunchSetup launch(arguments);
    for (auto _ : state) {
      if (!launch.launch(hooked)) {
        state.SkipWithError("cuLaunchKernel failed");
        break;
      }
      launch.count_launch();
    }
  }
  state.SetItemsProcessed(state.iterations());
  const std::string key = launch_key(arguments);
  state.SetLabel(hooked ? versus_label(key) : baseline_label(key));
}

// The hook's extra time measured in pairs: each iteration times a batch of
// launches straight to the sim and a batch through the hook, back to back
// (in alternating order), and the figure is the median of the pairs'
// differences. A drift of the machine over the run (another process, the
// allocator's state, the frequency) moves both batches of a pair alike and
// cancels, which separate benchmarks compared afterwards do not.
void paired(benchmark::State& state, Arguments arguments) {
  constexpr int kBatch = 128;
  std::vector<double> direct;
  std::vector<double> hooked;
  {
    LaunchSetup launch(arguments);
    const auto batch = [&](bool through_hook) {
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < kBatch; ++i) {
        if (!launch.launch(through_hook)) return -1.0;
      }
      const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
      for (int i = 0; i < kBatch; ++i) launch.count_launch();
      return took.count() / kBatch;
    };
    bool hook_first = false;
    for (auto _ : state) {
      const double first = batch(hook_first);
      const double second = batch(!hook_first);
      if (first < 0 || second < 0) {
        state.SkipWithError("cuLaunchKernel failed");
        break;
      }
      direct.push_back(hook_first ? second : first);
      hooked.push_back(hook_first ? first : second);
      hook_first = !hook_first;
    }
  }
  if (direct.empty()) return;
  std::vector<double> extra(direct.size());
  for (std::size_t i = 0; i < extra.size(); ++i) extra[i] = hooked[i] - direct[i];
  const auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  state.counters["direct_ns"] = median(direct);
  state.counters["hooked_ns"] = median(hooked);
  state.counters["extra_ns"] = median(extra);
  state.SetItemsProcessed(state.iterations() * 2 * kBatch);
}

void BM_SimLaunch_Scalars(benchmark::State& state) { launches(state, Arguments::scalars, false); }
void BM_HookedLaunch_Scalars(benchmark::State& state) { launches(state, Arguments::scalars, true); }
void BM_SimLaunch_PoolPointers(benchmark::State& state) { launches(state, Arguments::pool_pointers, false); }
void BM_HookedLaunch_PoolPointers(benchmark::State& state) { launches(state, Arguments::pool_pointers, true); }
void BM_SimLaunch_Struct(benchmark::State& state) { launches(state, Arguments::by_value, false); }
void BM_HookedLaunch_Struct(benchmark::State& state) { launches(state, Arguments::by_value, true); }
BENCHMARK(BM_SimLaunch_Scalars);
BENCHMARK(BM_HookedLaunch_Scalars);
BENCHMARK(BM_SimLaunch_PoolPointers);
BENCHMARK(BM_HookedLaunch_PoolPointers);
BENCHMARK(BM_SimLaunch_Struct);
BENCHMARK(BM_HookedLaunch_Struct);
void BM_HookExtra_Scalars(benchmark::State& state) { paired(state, Arguments::scalars); }
void BM_HookExtra_PoolPointers(benchmark::State& state) { paired(state, Arguments::pool_pointers); }
void BM_HookExtra_Struct(benchmark::State& state) { paired(state, Arguments::by_value); }
BENCHMARK(BM_HookExtra_Scalars);
BENCHMARK(BM_HookExtra_PoolPointers);
BENCHMARK(BM_HookExtra_Struct);

}  // namespace
}  // namespace tidepool::bench

int main(int argc, char** argv) { return tidepool::bench::run_benchmarks(argc, argv); }
