// bench_live_replay: a training trace replayed live through the preload, the
// path users take, on the simulated driver. Owns the live replay program:
// re-executing itself under LD_PRELOAD=libtidepool.so, driving the trace
// through the hooked driver API in one free mode, and reporting per step
// what tidepool made the driver do and how well it used memory.
//
//   bench_live_replay [--frees device|stream|legacy|both|all] [--steps N] [--kernel-us U] [--json] TRACE...
//
// The parent runs one child per (trace, mode) and prints what they print.
// A child makes the calls a program makes:
//   device  cuMemAlloc_v2 / cuMemFree_v2, work on the legacy stream (cudaFree semantics)
//   stream  cuMemAllocAsync / cuMemFreeAsync on one non-blocking stream, work on it
//   legacy  cuMemAllocAsync / cuMemFreeAsync on the legacy default stream, work
//           on it: the trace's stream 0 as it is (PyTorch's default stream,
//           and what tidepool-replay --frees stream replays)
// both: device and stream; all: the three.
// After each allocation it launches a sim "kernel" on that stream that writes
// the buffer's first bytes and spins for U microseconds, so the device lags
// the host as a GPU does and frees meet pending work. Driver calls are read
// from the sim's own counters at each step boundary; during the steps the
// bench itself calls none of the counted functions (kernel launches and
// stream creation are not counted), so every count is tidepool's.
// Utilization comes from tidepool's own statistics (tidepool_get_stats).
// Figures are what one run measured: nothing here asserts a target.
#include <cuda.h>
#include <dlfcn.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "child_process.hpp"
#include "driver_calls.hpp"
#include "replay.hpp"
#include "sim/sim_control.h"
#include "steps.hpp"
#include "tidepool/tidepool.h"

namespace {

using tidepool::bench::run_child;
using tidepool::bench::self_path;
using tidepool::replay::DriverCalls;
using tidepool::replay::Step;
using tidepool::replay::TraceAction;
using tidepool::replay::TraceEvent;
using Clock = std::chrono::steady_clock;

// Set in the children's environment: a process that has it is preloaded.
constexpr const char* kChildMarker = "TIDEPOOL_LIVE_REPLAY_CHILD";

struct Options {
  std::vector<std::string> modes;  // "device", "stream"
  std::size_t steps = 0;           // 0: detect them
  double kernel_us = 2;
  bool json = false;
  std::vector<std::string> traces;
};

void usage(std::FILE* out) {
  std::fprintf(out,
               "usage: bench_live_replay [--frees device|stream|legacy|both|all] [--steps N] [--kernel-us U] [--json] "
               "TRACE...\n"
               "Replays each training trace live through LD_PRELOAD=libtidepool.so on the simulated driver and\n"
               "prints utilization and the driver calls tidepool made, per step, in each free mode.\n");
}

// False with `error` on bad arguments.
bool parse(int argc, char** argv, Options* o, std::string* error) {
  std::string frees = "both";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= argc) {
        *error = arg + " needs a value";
        return false;
      }
      *out = argv[++i];
      return true;
    };
    std::string v;
    if (arg == "--frees") {
      if (!value(&frees)) return false;
    } else if (arg == "--steps") {
      if (!value(&v)) return false;
      char* end = nullptr;
      const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n == 0) {
        *error = "--steps: not a positive count: \"" + v + "\"";
        return false;
      }
      o->steps = static_cast<std::size_t>(n);
    } else if (arg == "--kernel-us") {
      if (!value(&v)) return false;
      char* end = nullptr;
      o->kernel_us = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(o->kernel_us >= 0) || o->kernel_us > 1e6) {
        *error = "--kernel-us: not a duration in microseconds: \"" + v + "\"";
        return false;
      }
    } else if (arg == "--json") {
      o->json = true;
    } else if (arg == "--help" || arg == "-h") {
      usage(stdout);
      std::exit(0);
    } else if (!arg.empty() && arg[0] == '-') {
      *error = "unknown option " + arg;
      return false;
    } else {
      o->traces.push_back(arg);
    }
  }
  if (frees == "both") {
    o->modes = {"device", "stream"};
  } else if (frees == "all") {
    o->modes = {"device", "stream", "legacy"};
  } else if (frees == "device" || frees == "stream" || frees == "legacy") {
    o->modes = {frees};
  } else {
    *error = "--frees: expected device, stream, legacy, both or all, not \"" + frees + "\"";
    return false;
  }
  if (o->traces.empty()) {
    *error = "no trace given";
    return false;
  }
  return true;
}

// ---------------------------------------------------------------------------
// The parent: one preloaded child per (trace, mode).

int parent_main(const Options& o) {
  const std::string self = self_path();
  if (self.empty()) {
    std::fprintf(stderr, "bench_live_replay: cannot find its own executable\n");
    return 1;
  }
  int failures = 0;
  for (const auto& trace : o.traces) {
    for (const auto& mode : o.modes) {
      std::vector<std::string> args = {self, "--frees", mode, "--kernel-us", std::to_string(o.kernel_us)};
      if (o.steps != 0) args.insert(args.end(), {"--steps", std::to_string(o.steps)});
      if (o.json) args.emplace_back("--json");
      args.push_back(trace);
      std::string out;
      const int status = run_child(args, kChildMarker, &out);
      std::fputs(out.c_str(), stdout);
      std::fflush(stdout);
      if (status != 0) {
        std::fprintf(stderr, "bench_live_replay: %s, frees=%s: the replay failed (status %d)\n", trace.c_str(),
                     mode.c_str(), status);
        ++failures;
      }
    }
  }
  return failures == 0 ? 0 : 1;
}

// ---------------------------------------------------------------------------
// The child: the replay itself, preloaded.

#define LIVE_CHECK(call)                                                                                      \
  do {                                                                                                        \
    const CUresult live_check_result = (call);                                                                \
    if (live_check_result != CUDA_SUCCESS) {                                                                  \
      std::fprintf(stderr, "bench_live_replay: %s failed: %d\n", #call, static_cast<int>(live_check_result)); \
      return 1;                                                                                               \
    }                                                                                                         \
  } while (0)

// The kernel: writes the new buffer's first bytes, then spins on the stream's
// worker thread, so the device runs behind the host.
void touch_and_spin(void** params, void* /*user*/) {
  const auto address = *static_cast<CUdeviceptr*>(params[0]);
  const auto bytes = *static_cast<std::size_t*>(params[1]);
  const auto spin_ns = *static_cast<std::uint64_t*>(params[2]);
  std::memset(reinterpret_cast<void*>(address), 0x5a, std::min<std::size_t>(bytes, 8));
  const auto until = Clock::now() + std::chrono::nanoseconds(spin_ns);
  while (Clock::now() < until) {
  }
}

struct StepRecord {
  Step step{};
  std::uint64_t allocations = 0;
  double ns = 0;
  DriverCalls calls;
  std::uint64_t live_bytes = 0;  // at the step's end
  std::uint64_t reserved_bytes = 0;
};

std::string base_name(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

double mib(std::uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

nlohmann::json step_json(std::size_t index, const StepRecord& s) {
  const std::uint64_t events = s.step.end - s.step.begin;
  nlohmann::json j = {{"index", index},
                      {"begin", s.step.begin},
                      {"end", s.step.end},
                      {"events", events},
                      {"allocations", s.allocations},
                      {"ns_per_event", events == 0 ? 0.0 : s.ns / static_cast<double>(events)},
                      {"vmm", s.calls.vmm()},
                      {"syncs", s.calls.syncs()},
                      {"event_calls", s.calls.events()},
                      {"live_bytes_at_end", s.live_bytes},
                      {"reserved_bytes_at_end", s.reserved_bytes}};
  // The same names and nesting as tidepool-replay's JSON (docs/replay.md).
  nlohmann::json calls = nlohmann::json::object();
  for (const auto& [key, count] : tidepool::replay::named_counts(s.calls)) calls[key] = count;
  j["driver_calls"] = std::move(calls);
  return j;
}

struct Run {
  std::string trace;
  std::string mode;
  std::string conf;  // the TIDEPOOL_CONF the user set, if any
  bool detected = true;
  double kernel_us = 0;
  std::uint64_t events = 0;
  std::uint64_t failed_allocations = 0;
  double ns = 0;
  tidepool_stats stats{};  // at the end of the trace
  std::vector<StepRecord> steps;
};

void print_json(const Run& r) {
  nlohmann::json steps = nlohmann::json::array();
  for (std::size_t i = 0; i < r.steps.size(); ++i) steps.push_back(step_json(i, r.steps[i]));
  const nlohmann::json j = {
      {"trace", r.trace},
      {"frees", r.mode},
      {"conf", r.conf},
      {"step_source", r.detected ? "detected" : "split"},
      {"kernel_us", r.kernel_us},
      {"events", r.events},
      {"failed_allocations", r.failed_allocations},
      {"utilization", r.stats.utilization},
      {"peak_live_bytes", r.stats.peak_live_bytes},
      {"peak_reserved_bytes", r.stats.peak_reserved_bytes},
      {"reserved_bytes_at_end", r.stats.reserved_bytes},
      {"ns_per_event", r.events == 0 ? 0.0 : r.ns / static_cast<double>(r.events)},
      {"last_step", steps.back()},
      {"steps", steps},
  };
  std::printf("%s\n", j.dump().c_str());
}

void print_table(const Run& r) {
  const StepRecord& last = r.steps.back();
  const std::string failed =
      r.failed_allocations == 0 ? "" : ", " + std::to_string(r.failed_allocations) + " failed allocations";
  const std::string conf = r.conf.empty() ? "" : " (TIDEPOOL_CONF=\"" + r.conf + "\")";
  std::printf(
      "%s, frees=%s%s: %llu events, %zu steps (%s); utilization %.4f (peak live %.1f MiB, peak reserved %.1f MiB, "
      "reserved at end %.1f MiB), %.0f ns/event; last step: vmm %llu, ctx syncs %llu, event calls %llu%s\n",
      base_name(r.trace).c_str(), r.mode.c_str(), conf.c_str(), static_cast<unsigned long long>(r.events),
      r.steps.size(), r.detected ? "detected" : "split", r.stats.utilization, mib(r.stats.peak_live_bytes),
      mib(r.stats.peak_reserved_bytes), mib(r.stats.reserved_bytes),
      r.events == 0 ? 0.0 : r.ns / static_cast<double>(r.events), static_cast<unsigned long long>(last.calls.vmm()),
      static_cast<unsigned long long>(last.calls.context_syncs), static_cast<unsigned long long>(last.calls.events()),
      failed.c_str());
  std::printf("  %4s %8s %7s %8s %6s %8s %9s %9s %9s %8s %9s %9s %9s %9s\n", "step", "events", "allocs", "ns/event",
              "vmm", "ctx_sync", "strm_sync", "ev_record", "ev_query", "ev_sync", "strm_wait", "sim_alloc", "live MiB",
              "resv MiB");
  for (std::size_t i = 0; i < r.steps.size(); ++i) {
    const StepRecord& s = r.steps[i];
    const std::uint64_t events = s.step.end - s.step.begin;
    const DriverCalls& c = s.calls;
    std::printf("  %4zu %8llu %7llu %8.0f %6llu %8llu %9llu %9llu %9llu %8llu %9llu %9llu %9.1f %9.1f\n", i,
                static_cast<unsigned long long>(events), static_cast<unsigned long long>(s.allocations),
                events == 0 ? 0.0 : s.ns / static_cast<double>(events), static_cast<unsigned long long>(c.vmm()),
                static_cast<unsigned long long>(c.context_syncs), static_cast<unsigned long long>(c.stream_syncs),
                static_cast<unsigned long long>(c.event_records), static_cast<unsigned long long>(c.event_queries),
                static_cast<unsigned long long>(c.event_syncs), static_cast<unsigned long long>(c.stream_waits),
                static_cast<unsigned long long>(c.mem_allocs), mib(s.live_bytes), mib(s.reserved_bytes));
  }
  std::printf("\n");
}

int child_main(const Options& o) {
  if (o.modes.size() != 1 || o.traces.size() != 1) {
    std::fprintf(stderr, "bench_live_replay: a child replays one trace in one mode\n");
    return 2;
  }
  using GetStats = tidepool_status (*)(int, tidepool_stats*);
  const auto get_stats = reinterpret_cast<GetStats>(::dlsym(RTLD_DEFAULT, "tidepool_get_stats"));
  if (get_stats == nullptr) {
    std::fprintf(stderr, "bench_live_replay: libtidepool.so is not preloaded\n");
    return 1;
  }
  Run run;
  run.trace = o.traces.front();
  run.mode = o.modes.front();
  run.kernel_us = o.kernel_us;
  if (const char* conf = std::getenv("TIDEPOOL_CONF")) run.conf = conf;
  const bool device_mode = run.mode == "device";
  std::vector<TraceEvent> events;
  std::string error;
  if (!tidepool::replay::load_trace(run.trace, &events, &error)) {
    std::fprintf(stderr, "bench_live_replay: %s\n", error.c_str());
    return 2;
  }
  run.detected = o.steps == 0;
  const std::vector<Step> steps =
      run.detected ? tidepool::replay::detect_steps(events) : tidepool::replay::split_steps(events, o.steps);
  run.events = events.size();

  CUdevice device = 0;
  CUcontext context = nullptr;
  LIVE_CHECK(cuInit(0));
  LIVE_CHECK(cuDeviceGet(&device, 0));
  LIVE_CHECK(cuDevicePrimaryCtxRetain(&context, device));
  LIVE_CHECK(cuCtxSetCurrent(context));
  CUfunction kernel = nullptr;
  const std::size_t param_sizes[] = {sizeof(CUdeviceptr), sizeof(std::size_t), sizeof(std::uint64_t)};
  LIVE_CHECK(tidepool_sim_register_kernel(&kernel, &touch_and_spin, nullptr, 3, param_sizes));
  CUstream stream = nullptr;  // the legacy stream, but in stream mode
  const bool own_stream = run.mode == "stream";
  if (own_stream) LIVE_CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  std::uint64_t spin_ns = static_cast<std::uint64_t>(o.kernel_us * 1000.0);

  const auto allocate = [&](std::size_t size, CUdeviceptr* p) {
    return device_mode ? cuMemAlloc(p, size) : cuMemAllocAsync(p, size, stream);
  };
  const auto release = [&](CUdeviceptr p) { return device_mode ? cuMemFree(p) : cuMemFreeAsync(p, stream); };
  const auto stats_now = [&] {
    tidepool_stats s{};
    (void)get_stats(0, &s);
    return s;
  };

  std::unordered_map<std::uint64_t, CUdeviceptr> live;  // trace pointer -> our pointer
  live.reserve(events.size());
  std::size_t next_step = 0;
  DriverCalls at_step_start = tidepool::replay::read_sim_calls(&tidepool_sim_call_count);
  Clock::time_point step_start = Clock::now();
  std::uint64_t step_allocations = 0;
  const auto close_step = [&] {
    const auto now = Clock::now();
    StepRecord record;
    record.step = steps[next_step];
    record.allocations = step_allocations;
    record.ns = std::chrono::duration<double, std::nano>(now - step_start).count();
    const DriverCalls calls = tidepool::replay::read_sim_calls(&tidepool_sim_call_count);
    record.calls = calls - at_step_start;
    const tidepool_stats s = stats_now();
    record.live_bytes = s.live_bytes;
    record.reserved_bytes = s.reserved_bytes;
    run.ns += record.ns;
    run.steps.push_back(record);
    ++next_step;
    step_allocations = 0;
    // What reading the figures cost is nobody's step.
    at_step_start = tidepool::replay::read_sim_calls(&tidepool_sim_call_count);
    step_start = Clock::now();
  };

  for (std::size_t i = 0; i < events.size(); ++i) {
    while (next_step < steps.size() && i == steps[next_step].end) close_step();
    const TraceEvent& e = events[i];
    switch (e.action) {
      case TraceAction::allocate: {
        CUdeviceptr p = 0;
        ++step_allocations;
        if (allocate(e.size, &p) != CUDA_SUCCESS) {
          ++run.failed_allocations;
          break;
        }
        if (!live.emplace(e.pointer, p).second) {
          std::fprintf(stderr, "bench_live_replay: %s:%llu: pointer allocated twice without a free\n",
                       run.trace.c_str(), static_cast<unsigned long long>(e.line));
          return 2;
        }
        std::size_t size = e.size;
        void* params[] = {&p, &size, &spin_ns};
        LIVE_CHECK(cuLaunchKernel(kernel, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr));
        break;
      }
      case TraceAction::allocate_failure: {
        // The program was refused: ask again, and give back what we get.
        CUdeviceptr p = 0;
        if (allocate(e.size, &p) == CUDA_SUCCESS) {
          LIVE_CHECK(release(p));
        } else {
          ++run.failed_allocations;
        }
        break;
      }
      case TraceAction::free: {
        auto it = live.find(e.pointer);
        if (it == live.end()) {
          // Its allocation failed (counted), or the trace is broken.
          if (run.failed_allocations > 0) break;
          std::fprintf(stderr, "bench_live_replay: %s:%llu: free of an unknown pointer\n", run.trace.c_str(),
                       static_cast<unsigned long long>(e.line));
          return 2;
        }
        LIVE_CHECK(release(it->second));
        live.erase(it);
        break;
      }
    }
  }
  while (next_step < steps.size()) close_step();
  run.stats = stats_now();

  LIVE_CHECK(cuCtxSynchronize());
  for (const auto& [trace_pointer, p] : live) LIVE_CHECK(release(p));
  LIVE_CHECK(cuStreamSynchronize(stream));
  if (own_stream) LIVE_CHECK(cuStreamDestroy(stream));
  if (o.json) {
    print_json(run);
  } else {
    print_table(run);
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  std::string error;
  if (!parse(argc, argv, &options, &error)) {
    std::fprintf(stderr, "bench_live_replay: %s\n", error.c_str());
    usage(stderr);
    return 2;
  }
  const char* marker = std::getenv(kChildMarker);
  return marker != nullptr && *marker != '\0' ? child_main(options) : parent_main(options);
}
