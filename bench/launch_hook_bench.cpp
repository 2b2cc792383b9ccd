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
// launch, which would time the scheduler); every 1024 launches the flag
// opens, the stream drains and a new holder is queued, in both runs alike.
//
// Figures: ns per launch (time per iteration), and the ratio table's extra
// ns per launch over the baseline.
#include <benchmark/benchmark.h>
#include <cuda.h>
#include <dlfcn.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "bench_support.hpp"
#include "sim/sim_control.h"

namespace tidepool::bench {
namespace {

using Launch = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                            void**, void**);
using Alloc = CUresult (*)(CUdeviceptr*, std::size_t);

void nothing(void** /*params*/, void* /*user*/) {}

void hold_until_open(void** params, void* /*user*/) {
  const auto* open = *static_cast<std::atomic<bool>**>(params[0]);
  while (!open->load(std::memory_order_acquire)) std::this_thread::yield();
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

void launches(benchmark::State& state, Arguments arguments, bool hooked) {
  const Setup& s = setup();
  const Launch launch = hooked ? s.hooked : s.direct;
  std::array<std::uint64_t, 6> scalars{1, 2, 3, 4, 5, 6};
  std::array<std::uint64_t, 6> mixed{s.blocks[0], 7, s.blocks[1], 8, s.blocks[2] + 4096, 9};
  std::array<std::uint64_t, 16> record{};
  record[3] = s.blocks[0];
  record[11] = s.blocks[1] + 64;
  std::array<void*, 6> params{};
  CUfunction f = s.scalars;
  switch (arguments) {
    case Arguments::scalars:
      for (std::size_t i = 0; i < params.size(); ++i) params[i] = &scalars[i];
      break;
    case Arguments::pool_pointers:
      f = s.pool_pointers;
      for (std::size_t i = 0; i < params.size(); ++i) params[i] = &mixed[i];
      break;
    case Arguments::by_value:
      f = s.by_value;
      params[0] = record.data();
      break;
  }
  const driver::Api& api = sim().api();
  std::atomic<bool> open{false};
  std::atomic<bool>* flag = &open;
  void* holder_params[] = {&flag};
  const auto hold = [&] {
    open.store(false, std::memory_order_relaxed);
    (void)s.direct(s.holder, 1, 1, 1, 1, 1, 1, 0, s.stream, holder_params, nullptr);
  };
  const auto drain = [&] {
    open.store(true, std::memory_order_release);
    (void)api.streamSynchronize(s.stream);
  };
  hold();
  std::size_t n = 0;
  for (auto _ : state) {
    if (launch(f, 1, 1, 1, 1, 1, 1, 0, s.stream, params.data(), nullptr) != CUDA_SUCCESS) {
      state.SkipWithError("cuLaunchKernel failed");
      break;
    }
    if (++n % 1024 == 0) {
      drain();
      hold();
    }
  }
  drain();
  state.SetItemsProcessed(state.iterations());
  const char* keys[] = {"scalars", "pool_pointers", "struct"};
  const std::string key = std::string("launch_") + keys[static_cast<int>(arguments)];
  state.SetLabel(hooked ? versus_label(key) : baseline_label(key));
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

}  // namespace
}  // namespace tidepool::bench

int main(int argc, char** argv) { return tidepool::bench::run_benchmarks(argc, argv); }
