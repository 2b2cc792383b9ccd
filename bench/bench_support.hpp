// Shared set-up for the benchmarks: the sim driver, an Allocator over it, real
// sim streams, and a main() that ends with a table of ratios.
//
// Ratios: a benchmark that is a baseline labels itself `baseline:KEY`; one
// measured against it labels itself `vs:KEY` (a label may carry both). Both
// run in the same process, one after the other, and the table at the end
// gives throughput / baseline throughput (items per second), so > 1 means
// faster than the baseline, and the time per item over the baseline's
// (extra_ns). scripts/bench.sh collects these tables.
#pragma once

#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "driver/driver.hpp"
#include "runtime/runtime.hpp"

namespace tidepool::bench {

inline const driver::Driver& sim() {
  static std::unique_ptr<driver::Driver> driver = [] {
    auto opened = driver::Driver::open(TIDEPOOL_SIM_LIBRARY);
    if (!opened) {
      std::fprintf(stderr, "cannot open the sim driver: %s\n", opened.status().message());
      std::exit(1);
    }
    return std::move(opened.value());
  }();
  return *driver;
}

inline std::unique_ptr<runtime::Allocator> make_allocator(const std::string& policy, std::size_t limit = 0,
                                                          runtime::TraceRecorder* trace = nullptr) {
  runtime::AllocatorOptions options;
  options.pool.policy = policy;
  options.device_limit = limit;
  options.trace = trace;
  auto created = runtime::Allocator::create(sim(), options);
  if (!created) {
    std::fprintf(stderr, "cannot create the allocator: %s\n", created.status().message());
    std::exit(1);
  }
  return std::move(created.value());
}

// Device 0's primary context, retained once and made current on the calling
// thread (the driver baselines call cuMemAlloc, which needs one).
inline CUcontext use_primary_context() {
  static const CUcontext context = [] {
    const driver::Api& api = sim().api();
    CUdevice device = 0;
    CUcontext ctx = nullptr;
    if (api.init(0) != CUDA_SUCCESS || api.deviceGet(&device, 0) != CUDA_SUCCESS ||
        api.devicePrimaryCtxRetain(&ctx, device) != CUDA_SUCCESS) {
      std::fprintf(stderr, "the sim driver has no device 0\n");
      std::exit(1);
    }
    return ctx;
  }();
  sim().api().ctxSetCurrent(context);
  return context;
}

// A real stream of the sim, one per index, created on first use and kept.
inline std::uintptr_t stream(int index) {
  static std::mutex lock;
  static std::map<int, CUstream> streams;
  std::lock_guard<std::mutex> guard(lock);
  CUstream& s = streams[index];
  if (s == nullptr) {
    use_primary_context();
    if (sim().api().streamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
      std::fprintf(stderr, "cannot create a sim stream\n");
      std::exit(1);
    }
  }
  return reinterpret_cast<std::uintptr_t>(s);
}

// Labels for the ratio table.
inline std::string baseline_label(const std::string& key) { return "baseline:" + key; }
inline std::string versus_label(const std::string& key) { return "vs:" + key; }

// The console reporter plus the ratio table at the end.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  RatioReporter() : ConsoleReporter(::isatty(STDOUT_FILENO) != 0 ? OO_Color : OO_None) {}

  // With --benchmark_repetitions the table uses each benchmark's median
  // (repetitions interleaved with --benchmark_enable_random_interleaving
  // make a noisy machine's drift fall on every benchmark alike).
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.error_occurred) continue;
      const bool median = run.run_type == Run::RT_Aggregate && run.aggregate_name == "median";
      if (run.run_type != Run::RT_Iteration && !median) continue;
      auto rate = run.counters.find("items_per_second");
      if (rate == run.counters.end()) continue;
      const std::string name = run.run_name.str();
      std::istringstream words(run.report_label);
      for (std::string word; words >> word;) {
        if (word.rfind("baseline:", 0) == 0) {
          const std::string key = word.substr(9);
          if (median || !baseline_is_median_[key]) baselines_[key] = rate->second.value;
          if (median) baseline_is_median_[key] = true;
        }
        if (word.rfind("vs:", 0) != 0) continue;
        auto found =
            std::find_if(measured_.begin(), measured_.end(), [&](const Measured& m) { return m.name == name; });
        if (found == measured_.end()) {
          measured_.push_back({name, word.substr(3), rate->second.value, median});
        } else if (median || !found->median) {
          found->rate = rate->second.value;
          found->median = median;
        }
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }

  void Finalize() override {
    ConsoleReporter::Finalize();
    if (measured_.empty()) return;
    std::ostream& out = GetOutputStream();
    out << "\n---- ratios against baselines measured in this run (throughput / baseline; > 1 is faster) ----\n";
    char line[512];
    std::snprintf(line, sizeof line, "%-60s %12s  %-34s %12s %9s %12s\n", "benchmark", "items/s", "baseline",
                  "baseline/s", "ratio", "extra_ns");
    out << line;
    for (const Measured& m : measured_) {
      auto base = baselines_.find(m.key);
      if (base == baselines_.end() || base->second <= 0) {
        std::snprintf(line, sizeof line, "%-60s %12s  %-34s %12s %9s %12s\n", m.name.c_str(), human(m.rate).c_str(),
                      m.key.c_str(), "(not run)", "-", "-");
      } else {
        // Time per item over the baseline's: what the measured path adds.
        const double extra_ns = 1e9 / m.rate - 1e9 / base->second;
        std::snprintf(line, sizeof line, "%-60s %12s  %-34s %12s %8.2fx %12.1f\n", m.name.c_str(),
                      human(m.rate).c_str(), m.key.c_str(), human(base->second).c_str(), m.rate / base->second,
                      extra_ns);
      }
      out << line;
    }
    out << "---- end of ratios ----\n";
  }

 private:
  struct Measured {
    std::string name;
    std::string key;
    double rate;
    bool median;
  };
  static std::string human(double rate) {
    const char* units[] = {"", "k", "M", "G"};
    int u = 0;
    while (rate >= 1000 && u < 3) {
      rate /= 1000;
      ++u;
    }
    char text[32];
    std::snprintf(text, sizeof text, "%.3g%s/s", rate, units[u]);
    return text;
  }
  std::map<std::string, double> baselines_;
  std::map<std::string, bool> baseline_is_median_;
  std::vector<Measured> measured_;
};

// BENCHMARK_MAIN with the ratio table.
inline int run_benchmarks(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}

}  // namespace tidepool::bench
