// bench_residency_live: bench_residency's training step on the path a user's
// program takes. Each run re-executes this program under
// LD_PRELOAD=libtidepool.so with the sim as libcuda.so.1 and
// TIDEPOOL_CONF="evict:on,prefetch:MODE,device_limit:BYTES", and the child
// makes the driver calls a program makes: cuMemAlloc_v2/cuMemFree_v2
// (cudaFree-style frees, `device`) or cuMemAllocAsync/cuMemFreeAsync on the
// launch stream (stream-ordered frees, `stream`), and cuLaunchKernel on one
// non-blocking stream, so the preload's hooks scan every launch and the
// device lags the host as it does under a framework.
//
//   bench_residency_live [--layers 12] [--activation-mib 8] [--kernel-ms 5] [--steps 11]
//                        [--copy-gbps 2] [--vmm-us create:14.5,...] [--frees device,stream]
//                        [--modes off,launch,learn]
//                        [--budgets 50,33.3] [--json PATH]
//                        [--data touch|dense|half-zero|mix] [--compress off,zero,auto]
//
// The step (see bench/layer_kernel.hpp and residency_bench.cpp): a forward
// pass allocating and keeping an activation per layer, each launch reading
// the previous one; a backward pass in reverse allocating a gradient per
// layer, launching on its activation and the gradient above, then freeing
// both. Per free style: an unconstrained run (no budget, no eviction) gives
// the reference step time and peak reserved bytes; each budget is a share of
// that peak. Step 0 is a warm-up. Figures are what one run measured; nothing
// here asserts a target. --data and --compress are bench_residency's: what
// the blocks hold (every word verified every step but with `touch`), and the
// compress settings each launch or learn run is repeated with; the report
// each run writes gives the pinned peak and what compression did, the sim's
// copy counters the bytes over the bus.
#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "child_process.hpp"
#include "layer_kernel.hpp"
#include "sim/sim_control.h"
#include "step_options.hpp"
#include "tidepool/tidepool.h"

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr const char* kChildMarker = "TIDEPOOL_RESIDENCY_LIVE_CHILD";
constexpr double kMiB = 1024.0 * 1024.0;

struct Options {
  int layers = 12;
  double activation_mib = 8;
  double kernel_ms = 5;
  int steps = 11;
  double copy_gbps = 2;  // as bench_residency: the sim's copies at 2 GB/s
  // The sim's VMM calls cost what an H200's did (gpu/probe.cu, 2026-11-28),
  // pinning a host page (a HOST_NUMA create) included: a gate remaps pages
  // while the device waits, so free remaps flatter.
  std::string vmm_us = "create:7.7,map:0.7,access:20.8,unmap:12.9,release:8.6,host_create:770";
  std::vector<std::string> frees{"device", "stream"};
  std::vector<std::string> modes{"off", "launch", "learn"};
  std::vector<double> budget_percents{50, 100.0 / 3.0};
  std::string json_path;
  std::string child_frees;  // set in a child: the one free style it runs
  std::string data = "touch";
  std::vector<std::string> compress{"off"};
};

// As bench_residency's --data mix: the zero words in 256 by layer.
constexpr std::uint32_t kMixZeros[] = {90, 128, 154, 179, 205, 230, 115, 0};

// The child: one run, its figures as one JSON object on stdout.
class Child {
 public:
  explicit Child(const Options& o)
      : o_(o),
        bytes_(static_cast<std::size_t>(o.activation_mib * kMiB)),
        sleep_ns_(static_cast<std::uint64_t>(o.kernel_ms * 1e6)),
        device_frees_(o.child_frees == "device"),
        checks_data_(o.data != "touch") {}

  json run() {
    json out;
    if (!setup(&out)) return out;
    std::vector<double> step_ms;
    std::uint64_t bus_before = 0;
    for (int step = 0; step < o_.steps; ++step) {
      if (step == 1) bus_before = tidepool_sim_copied_bytes(0) + tidepool_sim_copied_bytes(1);
      const auto start = Clock::now();
      step_ = step;
      if (!this->step(&out) || !ok(cuStreamSynchronize(stream_), "cuStreamSynchronize", &out)) return out;
      if (wrong_.load() > 0) {
        out["failure"] = "step " + std::to_string(step) + ": " + std::to_string(wrong_.load()) + " words read wrong";
        return out;
      }
      if (step > 0) step_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    }
    out["bus_bytes_per_step"] =
        static_cast<double>(tidepool_sim_copied_bytes(0) + tidepool_sim_copied_bytes(1) - bus_before) /
        static_cast<double>(step_ms.size());
    out["verified_words"] = verified_;
    using GetStats = tidepool_status (*)(int, tidepool_stats*);
    tidepool_stats stats{};
    if (const auto get = reinterpret_cast<GetStats>(::dlsym(RTLD_DEFAULT, "tidepool_get_stats")); get != nullptr) {
      (void)get(0, &stats);
    }
    out["step_ms"] = step_ms;
    out["peak_reserved_bytes"] = stats.peak_reserved_bytes;
    out["peak_live_bytes"] = stats.peak_live_bytes;
    out["ooms"] = stats.ooms;
    out["host_read_launches"] = tidepool_sim_host_resident_launches();
    out["completed"] = true;
    return out;
  }

 private:
  static bool ok(CUresult r, const char* what, json* out) {
    if (r == CUDA_SUCCESS) return true;
    (*out)["failure"] = std::string(what) + " failed: " + std::to_string(static_cast<int>(r));
    return false;
  }

  bool setup(json* out) {
    if (::dlsym(RTLD_DEFAULT, "tidepool_get_stats") == nullptr) {
      (*out)["failure"] = "libtidepool.so is not preloaded";
      return false;
    }
    CUdevice device = 0;
    CUcontext context = nullptr;
    if (!ok(cuInit(0), "cuInit", out) || !ok(cuDeviceGet(&device, 0), "cuDeviceGet", out) ||
        !ok(cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain", out) ||
        !ok(cuCtxSetCurrent(context), "cuCtxSetCurrent", out)) {
      return false;
    }
    tidepool_sim_set_copy_gbps(o_.copy_gbps);
    const std::size_t sizes[] = {sizeof(std::uintptr_t), sizeof(std::uintptr_t), sizeof(std::uintptr_t),
                                 sizeof(std::size_t), sizeof(std::uint64_t)};
    // A library kernel, launched by its CUkernel handle as the CUDA runtime
    // launches a program's kernels.
    const std::size_t data_sizes[] = {sizeof(std::uintptr_t), sizeof(std::uintptr_t), sizeof(std::uintptr_t),
                                      sizeof(std::size_t),    sizeof(std::uint64_t),  sizeof(std::uint64_t),
                                      sizeof(std::uint64_t),  sizeof(std::uint64_t),  sizeof(void*)};
    CUkernel kernel = nullptr;
    const CUresult registered =
        checks_data_ ? tidepool_sim_register_library_kernel(&kernel, &tidepool::bench::data_layer_kernel, nullptr,
                                                            std::size(data_sizes), data_sizes)
                     : tidepool_sim_register_library_kernel(&kernel, &tidepool::bench::layer_kernel, nullptr, 5, sizes);
    if (!ok(registered, "registering the layer kernel", out)) return false;
    kernel_ = reinterpret_cast<CUfunction>(kernel);
    return ok(cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate", out);
  }

  bool allocate(CUdeviceptr* p, json* out) {
    return device_frees_ ? ok(cuMemAlloc(p, bytes_), "cuMemAlloc_v2", out)
                         : ok(cuMemAllocAsync(p, bytes_, stream_), "cuMemAllocAsync", out);
  }
  bool release(CUdeviceptr p, json* out) {
    if (p == 0) return true;
    return device_frees_ ? ok(cuMemFree(p), "cuMemFree_v2", out)
                         : ok(cuMemFreeAsync(p, stream_), "cuMemFreeAsync", out);
  }
  // Layer `layer`'s activation or gradient this step (--data).
  tidepool::bench::DataSpec spec(std::size_t layer, bool gradient) const {
    std::uint32_t zeros = 0;
    if (o_.data == "half-zero") zeros = 128;
    if (o_.data == "mix") zeros = kMixZeros[layer % std::size(kMixZeros)];
    return {static_cast<std::uint32_t>(step_ * 4096 + static_cast<int>(layer) * 2 + (gradient ? 1 : 0)), zeros};
  }
  bool launch(CUdeviceptr in_a, CUdeviceptr in_b, CUdeviceptr out_block, json* out,
              tidepool::bench::DataSpec spec_a = {}, tidepool::bench::DataSpec spec_b = {},
              tidepool::bench::DataSpec spec_out = {}) {
    std::size_t bytes = bytes_;
    std::uint64_t sleep_ns = sleep_ns_;
    std::uint64_t a = tidepool::bench::pack_spec(spec_a);
    std::uint64_t b = tidepool::bench::pack_spec(spec_b);
    std::uint64_t o = tidepool::bench::pack_spec(spec_out);
    std::atomic<std::uint64_t>* wrong = &wrong_;
    void* touch_params[] = {&in_a, &in_b, &out_block, &bytes, &sleep_ns};
    void* data_params[] = {&in_a, &in_b, &out_block, &bytes, &sleep_ns, &a, &b, &o, &wrong};
    if (checks_data_) verified_ += ((in_a != 0 ? 1U : 0U) + (in_b != 0 ? 1U : 0U)) * (bytes_ / 4);
    return ok(cuLaunchKernel(kernel_, 1, 1, 1, 1, 1, 1, 0, stream_, checks_data_ ? data_params : touch_params, nullptr),
              "cuLaunchKernel", out);
  }

  bool step(json* out) {
    const auto layers = static_cast<std::size_t>(o_.layers);
    std::vector<CUdeviceptr> activation(layers, 0);
    for (std::size_t l = 0; l < layers; ++l) {
      if (!allocate(&activation[l], out) ||
          !launch(l > 0 ? activation[l - 1] : 0, 0, activation[l], out,
                  l > 0 ? spec(l - 1, false) : tidepool::bench::DataSpec{}, {}, spec(l, false))) {
        return false;
      }
    }
    CUdeviceptr upper = 0;
    for (std::size_t l = layers; l-- > 0;) {
      CUdeviceptr gradient = 0;
      if (!allocate(&gradient, out) ||
          !launch(activation[l], upper, gradient, out, spec(l, false),
                  upper != 0 ? spec(l + 1, true) : tidepool::bench::DataSpec{}, spec(l, true)) ||
          !release(activation[l], out) || !release(upper, out)) {
        return false;
      }
      upper = gradient;
    }
    // The last gradient is read once, so that every block is checked.
    if (checks_data_ && !launch(upper, 0, 0, out, spec(0, true))) return false;
    return release(upper, out);
  }

  const Options& o_;
  std::size_t bytes_;
  std::uint64_t sleep_ns_;
  bool device_frees_;
  bool checks_data_;
  CUfunction kernel_ = nullptr;
  CUstream stream_ = nullptr;
  int step_ = 0;
  std::atomic<std::uint64_t> wrong_{0};
  std::uint64_t verified_ = 0;
};

struct Run {
  std::string frees;
  std::string budget;  // "none", "50%", ...
  std::size_t budget_bytes = 0;
  std::string mode;
  std::string compress = "off";
  std::string conf;
  json result;
  double mean_ms = 0;
  double steady_ms = 0;
};

double mean(const std::vector<double>& v, std::size_t from) {
  double total = 0;
  for (std::size_t i = from; i < v.size(); ++i) total += v[i];
  return v.size() > from ? total / static_cast<double>(v.size() - from) : 0;
}

Run run_child(const Options& o, const std::string& self, Run run) {
  std::vector<std::string> args{self,
                                "--layers",
                                std::to_string(o.layers),
                                "--activation-mib",
                                std::to_string(o.activation_mib),
                                "--kernel-ms",
                                std::to_string(o.kernel_ms),
                                "--steps",
                                std::to_string(o.steps),
                                "--copy-gbps",
                                std::to_string(o.copy_gbps),
                                "--data",
                                o.data,
                                "--child",
                                run.frees};
  // The report the child writes at exit: the pinned peak, what compression did.
  const std::string report = "/tmp/bench_residency_live." + std::to_string(::getpid()) + ".report.json";
  (void)std::remove(report.c_str());
  if (run.budget_bytes != 0) run.conf += ",report:" + report;
  std::string out;
  const int status =
      tidepool::bench::run_child(args, kChildMarker, &out,
                                 {"TIDEPOOL_CONF=" + run.conf, "TIDEPOOL_SIM_COPY_GBPS=" + std::to_string(o.copy_gbps),
                                  "TIDEPOOL_SIM_VMM_US=" + o.vmm_us});
  run.result = json::parse(out, nullptr, false);
  if (run.result.is_discarded() || !run.result.is_object()) {
    run.result = json{{"failure", "the child exited with " + std::to_string(status) + " and printed no result"}};
  }
  if (run.budget_bytes != 0) {
    std::ifstream in(report);
    const json whole = json::parse(in, nullptr, false);
    if (!whole.is_discarded() && whole.contains("devices") && !whole["devices"].empty()) {
      const json& d = whole["devices"][0];
      for (const char* key :
           {"host_cache_peak_bytes", "evicted_bytes", "compressing", "compressed_pages", "compression_ratio",
            "raw_by_sample_pages", "unsampled_pages", "expand_failures", "codec_ms", "residency_wait_ms",
            "residency_remap_ms", "pin_calls", "sync_pins", "sync_pin_ms", "maps", "unmaps", "access_grants"}) {
        if (d.contains(key)) run.result[key] = d[key];
      }
    }
    (void)std::remove(report.c_str());
  }
  if (run.result.value("completed", false)) {
    const auto steps = run.result["step_ms"].get<std::vector<double>>();
    run.mean_ms = mean(steps, 0);
    run.steady_ms = mean(steps, steps.size() / 2);
  }
  return run;
}

void print(const Run& r, const Run& reference) {
  const bool done = r.result.value("completed", false);
  const auto kept = [](double ref, double ms) { return ms > 0 ? ref / ms : 0.0; };
  std::printf(
      "%-6s %-6s %9.0f %-6s %-4s %8.1f %6.3f %6.3f %9llu %9.1f %10.1f %5.2f  %s\n", r.frees.c_str(), r.budget.c_str(),
      static_cast<double>(r.budget_bytes) / kMiB, r.mode.c_str(), r.compress.c_str(), r.mean_ms,
      done ? kept(reference.mean_ms, r.mean_ms) : 0.0, done ? kept(reference.steady_ms, r.steady_ms) : 0.0,
      static_cast<unsigned long long>(r.result.value("host_read_launches", 0ULL)),
      r.result.value("bus_bytes_per_step", 0.0) / kMiB,
      static_cast<double>(r.result.value("host_cache_peak_bytes", 0ULL)) / kMiB,
      r.result.value("compression_ratio", 0.0), done ? "ok" : r.result.value("failure", std::string("failed")).c_str());
  std::fflush(stdout);
}

int parent_main(const Options& o) {
  const std::string self = tidepool::bench::self_path();
  if (self.empty()) {
    std::fprintf(stderr, "bench_residency_live: cannot find its own executable\n");
    return 1;
  }
  std::printf(
      "bench_residency_live: %d layers, %g MiB activations, %g ms kernels, %d steps (1 warm-up), copies at "
      "%g GB/s, VMM calls %s, through LD_PRELOAD=libtidepool.so\n",
      o.layers, o.activation_mib, o.kernel_ms, o.steps, o.copy_gbps, o.vmm_us.empty() ? "free" : o.vmm_us.c_str());
  std::printf("%-6s %-6s %9s %-6s %-4s %8s %6s %6s %9s %9s %10s %5s  %s\n", "frees", "budget", "budgetMiB", "mode",
              "zip", "step_ms", "kept", "steady", "hostrd", "busMiB/st", "pinPeakMiB", "ratio", "status");
  json all = json::array();
  int failures = 0;
  for (const std::string& frees : o.frees) {
    Run reference = run_child(o, self, Run{frees, "none", 0, "off", "off", "log:error", {}, 0, 0});
    print(reference, reference);
    all.push_back(json{{"frees", frees}, {"budget", "none"}, {"mode", "off"}, {"result", reference.result}});
    if (!reference.result.value("completed", false)) {
      ++failures;
      continue;
    }
    const auto peak = reference.result["peak_reserved_bytes"].get<std::uint64_t>();
    for (const double percent : o.budget_percents) {
      const auto budget = static_cast<std::size_t>(static_cast<double>(peak) * percent / 100.0);
      char label[32];
      std::snprintf(label, sizeof label, "%.0f%%", percent);
      for (const std::string& mode : o.modes) {
        for (const std::string& compress : o.compress) {
          if (compress != "off" && mode == "off") continue;  // it needs the launch scan to bring pages back
          const std::string conf = "evict:on,prefetch:" + mode + ",compress:" + compress +
                                   ",device_limit:" + std::to_string(budget) + ",log:error";
          const Run r = run_child(o, self, Run{frees, label, budget, mode, compress, conf, {}, 0, 0});
          print(r, reference);
          const bool done = r.result.value("completed", false);
          failures += done ? 0 : 1;
          all.push_back(json{{"frees", frees},
                             {"budget", label},
                             {"budget_bytes", budget},
                             {"mode", mode},
                             {"compress", compress},
                             {"conf", r.conf},
                             {"throughput_kept", done ? reference.mean_ms / r.mean_ms : 0.0},
                             {"steady_kept", done ? reference.steady_ms / r.steady_ms : 0.0},
                             {"result", r.result}});
        }
      }
    }
  }
  if (!o.json_path.empty()) {
    std::ofstream file(o.json_path);
    file << all.dump(2) << "\n";
    if (!file) {
      std::fprintf(stderr, "bench_residency_live: cannot write %s\n", o.json_path.c_str());
      return 1;
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "A layer-by-layer training step under device budgets, through LD_PRELOAD=libtidepool.so on the "
      "simulated driver, with cudaFree-style and stream-ordered frees, in each prefetch mode."};
  tidepool::bench::add_step_options(app, o);
  app.add_option("--frees", o.frees, "Free styles: device (cuMemFree_v2), stream (cuMemFreeAsync)")
      ->delimiter(',')
      ->check(CLI::IsMember({"device", "stream"}));
  app.add_option("--modes", o.modes, "Prefetch modes under each budget")
      ->delimiter(',')
      ->check(CLI::IsMember({"off", "launch", "learn"}));
  app.add_option("--budgets", o.budget_percents, "Budgets, in percent of the unconstrained peak reserved bytes")
      ->delimiter(',')
      ->check(CLI::Range(1.0, 1000.0));
  app.add_option("--vmm-us", o.vmm_us, "Host µs per 2 MiB page of each sim VMM call (TIDEPOOL_SIM_VMM_US); empty: free")
      ->capture_default_str();
  app.add_option("--json", o.json_path, "Also write the results as JSON here");
  app.add_option("--data", o.data,
                 "What blocks hold: touch (a word a page), dense, half-zero or mix (verified in full)")
      ->check(CLI::IsMember({"touch", "dense", "half-zero", "mix"}));
  app.add_option("--compress", o.compress, "compress settings each launch and learn run is repeated with")
      ->delimiter(',')
      ->check(CLI::IsMember({"off", "zero", "auto"}));
  app.add_option("--child", o.child_frees, "(internal) run one free style under the preload")
      ->check(CLI::IsMember({"device", "stream"}));
  CLI11_PARSE(app, argc, argv);
  if (!o.child_frees.empty()) {
    if (std::getenv(kChildMarker) == nullptr) {
      std::fprintf(stderr, "bench_residency_live: --child runs only under the parent's preload\n");
      return 2;
    }
    const json result = Child(o).run();
    std::printf("%s\n", result.dump().c_str());
    return result.value("completed", false) ? 0 : 1;
  }
  return parent_main(o);
}
