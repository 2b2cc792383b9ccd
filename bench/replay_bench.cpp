// Replay throughput: events per second when the traces in TIDEPOOL_TRACES_DIR
// (data/traces) are replayed against each of tidepool's placement
// policies on the sim, against a baseline in the same run that replays the
// same trace straight onto the sim driver (cuMemAlloc/cuMemFree per event,
// what the program would pay without a pool).
//
// One iteration replays the whole trace, then frees whatever it left live,
// so every iteration starts from an empty pool with its pages cached: this
// is the steady state of a training loop. Only the allocator's calls and the
// pointer map are timed; loading the trace is not. The emulated baselines of
// tidepool-replay (pytorch_rules, rmm_pool, cuda_malloc) compute layouts,
// not allocations, so their speed means nothing and they are not run here.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench_support.hpp"
#include "pool/pool.hpp"
#include "replay.hpp"

namespace tidepool::bench {
namespace {

// What a replay talks to: tidepool's target, or the driver directly.
class DriverTarget final : public replay::Target {
 public:
  DriverTarget() : api_(sim().api()) { use_primary_context(); }
  std::string name() const override { return "driver"; }
  bool allocate(std::uint64_t size, std::uint64_t /*stream*/, std::uint64_t* address) override {
    CUdeviceptr p = 0;
    if (api_.memAlloc(&p, size) != CUDA_SUCCESS) return false;
    *address = p;
    return true;
  }
  void free(std::uint64_t address, std::uint64_t /*stream*/) override { api_.memFree(address); }
  replay::Counters counters() const override { return {}; }
  replay::Fragmentation fragmentation() const override { return {}; }
  std::vector<replay::Span> layout() const override { return {}; }

 private:
  const driver::Api& api_;
};

// Replays `events` once; returns the calls made, or -1 on an error (set on `state`).
std::int64_t replay_once(const std::vector<replay::TraceEvent>& events, replay::Target& target,
                         std::unordered_map<std::uint64_t, std::uint64_t>& live, benchmark::State& state) {
  std::int64_t calls = 0;
  for (const replay::TraceEvent& e : events) {
    switch (e.action) {
      case replay::TraceAction::allocate: {
        std::uint64_t address = 0;
        if (!target.allocate(e.size, e.stream, &address)) {
          state.SkipWithError("an allocation failed");
          return -1;
        }
        live[e.pointer] = address;
        break;
      }
      case replay::TraceAction::allocate_failure: {
        std::uint64_t address = 0;
        if (target.allocate(e.size, e.stream, &address)) target.free(address, e.stream);
        break;
      }
      case replay::TraceAction::free: {
        auto it = live.find(e.pointer);
        if (it == live.end()) {
          state.SkipWithError("a free of an unknown pointer");
          return -1;
        }
        target.free(it->second, e.stream);
        live.erase(it);
        break;
      }
    }
    ++calls;
  }
  for (const auto& [pointer, address] : live) {
    target.free(address, 0);
    ++calls;
  }
  live.clear();
  return calls;
}

void replay_benchmark(benchmark::State& state, const std::vector<replay::TraceEvent>* events, const std::string& policy,
                      const std::string& trace) {
  std::unique_ptr<replay::Target> target;
  if (policy == "driver") {
    target = std::make_unique<DriverTarget>();
  } else {
    std::string error;
    target = replay::make_tidepool_target(policy, {}, &error);
    if (!target) {
      state.SkipWithError(error.c_str());
      return;
    }
  }
  std::unordered_map<std::uint64_t, std::uint64_t> live;
  live.reserve(events->size());
  std::int64_t calls = 0;
  for (auto _ : state) {
    const std::int64_t n = replay_once(*events, *target, live, state);
    if (n < 0) break;
    calls += n;
  }
  state.SetItemsProcessed(calls);
  state.SetLabel(policy == "driver" ? baseline_label("driver/" + trace) : versus_label("driver/" + trace));
}

std::vector<std::string> trace_files() {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(TIDEPOOL_TRACES_DIR, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.ends_with(".csv") || name.ends_with(".csv.gz")) files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace
}  // namespace tidepool::bench

int main(int argc, char** argv) {
  using namespace tidepool;  // NOLINT(google-build-using-namespace): a benchmark's main
  // Loaded once, before any timing; they live until exit.
  static std::vector<std::vector<replay::TraceEvent>> traces;
  const auto files = bench::trace_files();
  if (files.empty()) std::fprintf(stderr, "replay_bench: no traces in %s\n", TIDEPOOL_TRACES_DIR);
  traces.reserve(files.size());
  for (const std::string& file : files) {
    std::vector<replay::TraceEvent> events;
    std::string error;
    if (!replay::load_trace(file, &events, &error)) {
      std::fprintf(stderr, "replay_bench: %s\n", error.c_str());
      return 1;
    }
    traces.push_back(std::move(events));
    const std::string trace = std::filesystem::path(file).filename().string();
    std::vector<std::string> targets = {"driver"};
    for (std::string_view p : pool::policy_names()) targets.emplace_back(p);
    for (const std::string& target : targets) {
      benchmark::RegisterBenchmark(("BM_Replay/" + trace + "/" + target).c_str(), bench::replay_benchmark,
                                   &traces.back(), target, trace)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  }
  return bench::run_benchmarks(argc, argv);
}
