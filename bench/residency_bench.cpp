// bench_residency: eviction under a device budget, on the simulated driver,
// for a training-like workload run layer by layer. Owns that workload and its
// report: how much of the unconstrained step time each budget and prefetch
// mode keeps, and what the residency layer moved to get there.
//
//   bench_residency [--layers L] [--activation-mib M] [--kernel-ms K] [--steps N]
//                   [--copy-gbps G] [--prefetch-ahead A] [--learn-ahead A]
//                   [--modes off,hints,launch,learn] [--budgets 100,50,33.3] [--json PATH]
//                   [--data touch|dense|half-zero|mix] [--compress off,zero,auto]
//
// A step is a forward pass over L layers, each allocating an activation
// (cudaMalloc semantics) and launching a kernel that reads the previous one
// and writes the new one, every activation kept; then a backward pass in
// reverse, each layer allocating a gradient, launching a kernel that reads
// its activation and the gradient above, and freeing both. Peak live memory
// is all activations at once, so a budget below it forces eviction of
// activations the backward pass will read again. A kernel sleeps K ms of wall
// time and touches a word in every 2 MiB page of the blocks it names, so
// evicted pages are really read where they lie.
//
// Runs, each on a fresh Allocator: no budget (the sim's whole device), then
// 100%, 50% and 33% of the peak reserved bytes that run measured, in each
// prefetch mode:
//   off     no hints: evicted pages come back only when a block is handed out
//           again over them; kernels read the rest on the host.
//   hints   before each backward layer, make_resident on the activations it
//           and the next A layers read.
//   launch  each launch is scanned as the preload's hooks scan it; blocks it
//           names come back (gated) before it.
//   learn   prefetch:learn: the launch schedule's period is found, blocks
//           come back --learn-ahead launches before their use and what the
//           next launches' allocations will evict is copied out ahead, all
//           as tracked moves (no gate).
// --data: what the blocks hold. touch (the default): a kernel writes one word
// a page, the rest is whatever the page held. dense, half-zero, mix: every
// word of a block is written by the kernel that makes it and checked by each
// kernel that reads it, and a step with a word read wrong fails the run, so
// every byte is verified every step; dense data has no zero word, half-zero
// data half its words zero (an fp32 activation after a ReLU), and mix a share
// of zeros by layer from 35% to 90%, as ReLU outputs have from the first
// layers to the last (cDMA, Rhu et al., HPCA 2018), with one layer in eight
// dense (no ReLU). --compress runs each budget and mode once per setting of
// TIDEPOOL_CONF's compress (it needs launch or learn: elsewhere it is off).
//
// Step 0 of each run is a warm-up (the host cache is pinned, the layout
// settles); the rest are timed with a steady clock up to a stream
// synchronisation. Figures are what one run measured: nothing here asserts a
// target. A run whose allocation fails is reported as failed, with the reason.
#include <cuda.h>
#include <dlfcn.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "driver/driver.hpp"
#include "layer_kernel.hpp"
#include "residency/residency.hpp"
#include "runtime/runtime.hpp"
#include "sim/sim_control.h"
#include "step_options.hpp"

namespace {

using namespace tidepool;
using Clock = std::chrono::steady_clock;

struct Options {
  int layers = 12;
  double activation_mib = 8;
  double kernel_ms = 5;
  int steps = 11;  // the first is a warm-up
  // The sim moves bytes through page tables at 1.5-3 GB/s on a 2-core
  // machine: a modelled link above that would time the sim, not the
  // residency layer. 2 GB/s with 8 MiB activations and 5 ms kernels keeps
  // the ratio of copy time to compute of 25 GB/s PCIe with 0.4 ms kernels.
  double copy_gbps = 2;
  int prefetch_ahead = 1;
  int learn_ahead = 4;
  std::vector<std::string> modes{"off", "hints", "launch", "learn"};
  std::vector<double> budget_percents{100, 50, 100.0 / 3.0};
  std::string json;
  std::string data = "touch";
  std::vector<std::string> compress{"off"};
};

// The zero words in 256 of each layer's blocks under --data mix, by layer.
constexpr std::uint32_t kMixZeros[] = {90, 128, 154, 179, 205, 230, 115, 0};

// The sim's control API, reached through the driver's handle as tests do: the
// sim is loaded like any driver, never linked.
struct SimControl {
  decltype(&tidepool_sim_register_kernel) register_kernel = nullptr;
  decltype(&tidepool_sim_set_copy_gbps) set_copy_gbps = nullptr;
  decltype(&tidepool_sim_host_resident_launches) host_resident_launches = nullptr;
  decltype(&tidepool_sim_copied_bytes) copied_bytes = nullptr;
};

template <typename Fn>
Fn sim_symbol(const driver::Driver& sim, const char* name) {
  return reinterpret_cast<Fn>(::dlsym(sim.handle(), name));
}

struct RunResult {
  std::string budget_label;  // "none", "100%", ...
  double budget_fraction = 0;
  std::size_t budget_bytes = 0;  // 0: no budget
  std::string mode;
  std::string compress = "off";
  bool completed = false;
  std::string failure;
  std::vector<double> step_ms;  // timed steps only
  double mean_step_ms = 0;
  double throughput_kept = 0;  // unconstrained mean / this mean
  // The second half of the timed steps: what a long run settles to, once
  // prefetch:learn has found the step (its first steps move blocks as
  // prefetch:launch does).
  double steady_step_ms = 0;
  double steady_kept = 0;
  bool eviction_on = false;
  std::string eviction_off_reason;
  double evicted_bytes_per_step = 0;
  double prefetched_bytes_per_step = 0;
  double evictions_per_step = 0;
  double prefetches_per_step = 0;
  double gates_per_step = 0;
  double host_read_launches_per_step = 0;  // launches whose arguments point at host pages
  std::uint64_t hint_ooms = 0;             // hints refused for want of room (allowed)
  std::uint64_t host_cache_bytes = 0;
  std::uint64_t host_cache_peak_bytes = 0;
  std::uint64_t pin_calls = 0;
  std::uint64_t gates = 0;
  std::uint64_t fallbacks = 0;
  std::uint64_t failed_moves = 0;
  std::uint64_t learned_period = 0;
  std::uint64_t tracked_moves = 0;
  std::uint64_t precopies = 0;
  std::uint64_t precopies_used = 0;
  std::uint64_t learned_prefetches = 0;
  // What the copies achieved, timed by events: on the sim the memmove into
  // freshly faulted pages, which can be slower than --copy-gbps allows.
  double to_host_gbps = 0;
  double to_device_gbps = 0;
  std::uint64_t ooms = 0;
  std::uint64_t peak_reserved_bytes = 0;
  std::uint64_t peak_live_bytes = 0;
  // Bytes over the host link each way (the sim's copy counters: copies and
  // the codec's kernels), per timed step.
  double bus_bytes_per_step = 0;
  bool compressing = false;
  std::uint64_t compressed_pages = 0;
  std::uint64_t raw_by_sample_pages = 0;
  double compression_ratio = 0;
  std::uint64_t verified_words = 0;  // --data other than touch: words checked, none wrong
  double wait_ms_per_step = 0;       // host time moving threads waited for the device
  double codec_ms_per_step = 0;      // device time of the compression kernels
};

struct Counters {
  residency::ResidencyStats residency;
  std::uint64_t host_read_launches = 0;
  std::uint64_t bus_bytes = 0;
};

class Workload {
 public:
  Workload(const driver::Driver& sim, const SimControl& control, CUfunction kernel, const Options& o)
      : sim_(sim),
        control_(control),
        kernel_(kernel),
        options_(o),
        bytes_(static_cast<std::size_t>(o.activation_mib * static_cast<double>(util::MiB))),
        sleep_ns_(static_cast<std::uint64_t>(o.kernel_ms * 1e6)),
        checks_data_(o.data != "touch") {}

  RunResult run(std::size_t budget, const std::string& mode, const std::string& compress = "off") {
    RunResult r;
    r.budget_bytes = budget;
    r.mode = mode;
    r.compress = compress;
    runtime::AllocatorOptions options;
    options.device_limit = budget;
    options.evict = true;
    options.residency.learn = mode == "learn";
    // As the runtime allows it: only where launches bring pages back.
    if ((mode == "launch" || mode == "learn") && compress != "off") {
      options.residency.compress =
          compress == "zero" ? residency::CompressMode::zero : residency::CompressMode::automatic;
    }
    options.residency.learn_ahead = static_cast<std::size_t>(std::max(1, options_.learn_ahead));
    scan_launches_ = mode == "launch" || mode == "learn";
    wrong_words_.store(0);
    verified_words_ = 0;
    auto created = runtime::Allocator::create(sim_, options);
    if (!created) {
      r.failure = std::string("cannot create the allocator: ") + created.status().message();
      return r;
    }
    allocator_ = std::move(created.value());
    r.eviction_on = allocator_->residency() != nullptr;
    r.eviction_off_reason = allocator_->eviction_off_reason();
    // The bench creates every stream it uses and tells the allocator, so the
    // registry is complete and moves are gated rather than synchronised.
    allocator_->streams().set_complete(true);
    {
      driver::ScopedContext scope(api(), allocator_->context());
      if (api().streamCreate(&stream_, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
        r.failure = "cannot create a stream";
        allocator_.reset();
        return r;
      }
      allocator_->stream_created(stream_);
      measure(mode == "hints", &r);
      // Whatever a failed step left live goes back before the pool does.
      (void)api().ctxSynchronize();
      for (std::uintptr_t p : live_) (void)allocator_->deallocate(p, 0, false);
      live_.clear();
      (void)api().streamSynchronize(stream_);
      allocator_->stream_destroying(stream_);
      (void)api().streamDestroy(stream_);
      stream_ = nullptr;
    }
    allocator_.reset();
    return r;
  }

 private:
  const driver::Api& api() const { return sim_.api(); }

  Counters counters() const {
    Counters c;
    if (const residency::Residency* res = allocator_->residency()) c.residency = res->stats();
    if (control_.host_resident_launches != nullptr) c.host_read_launches = control_.host_resident_launches();
    if (control_.copied_bytes != nullptr) c.bus_bytes = control_.copied_bytes(0) + control_.copied_bytes(1);
    return c;
  }

  void measure(bool hints, RunResult* r) {
    Counters before;
    for (int step = 0; step < options_.steps; ++step) {
      if (step == 1) before = counters();  // step 0 is the warm-up
      const auto start = Clock::now();
      bool done = this->step(hints, step, r);
      if (done && api().streamSynchronize(stream_) != CUDA_SUCCESS) {
        r->failure = "step " + std::to_string(step) + ": the stream failed";
        done = false;
      }
      if (done && wrong_words_.load() > 0) {
        r->failure = "step " + std::to_string(step) + ": " + std::to_string(wrong_words_.load()) + " words read wrong";
        done = false;
      }
      if (!done) {
        r->ooms = allocator_->pool().stats(false).ooms;
        return;
      }
      if (step > 0) r->step_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    }
    const Counters after = counters();
    const auto timed = static_cast<double>(r->step_ms.size());
    const auto per_step = [timed](std::uint64_t a, std::uint64_t b) { return static_cast<double>(b - a) / timed; };
    r->completed = true;
    double total = 0;
    for (double ms : r->step_ms) total += ms;
    r->mean_step_ms = total / timed;
    const std::size_t half = r->step_ms.size() / 2;
    double steady = 0;
    for (std::size_t i = half; i < r->step_ms.size(); ++i) steady += r->step_ms[i];
    r->steady_step_ms = steady / static_cast<double>(r->step_ms.size() - half);
    const residency::ResidencyStats& a = before.residency;
    const residency::ResidencyStats& b = after.residency;
    r->evicted_bytes_per_step = per_step(a.evicted_bytes, b.evicted_bytes);
    r->prefetched_bytes_per_step = per_step(a.prefetched_bytes, b.prefetched_bytes);
    r->evictions_per_step = per_step(a.evictions, b.evictions);
    r->prefetches_per_step = per_step(a.prefetches, b.prefetches);
    r->gates_per_step = per_step(a.gates, b.gates);
    r->host_read_launches_per_step = per_step(before.host_read_launches, after.host_read_launches);
    r->bus_bytes_per_step = per_step(before.bus_bytes, after.bus_bytes);
    r->compressing = b.compressing;
    r->compressed_pages = b.compression.compressed_pages;
    r->raw_by_sample_pages = b.compression.raw_pages;
    r->compression_ratio = b.compression.bytes_after == 0 ? 0
                                                          : static_cast<double>(b.compression.bytes_before) /
                                                                static_cast<double>(b.compression.bytes_after);
    r->verified_words = verified_words_;
    r->wait_ms_per_step = (b.move_wait_ms - a.move_wait_ms) / timed;
    r->codec_ms_per_step = (b.compression.codec_ms - a.compression.codec_ms) / timed;
    r->host_cache_bytes = b.host_cache_bytes;
    r->host_cache_peak_bytes = b.host_cache_peak_bytes;
    r->pin_calls = b.pin_calls;
    r->gates = b.gates;
    r->fallbacks = b.fallbacks;
    r->learned_period = b.learned_period;
    r->tracked_moves = b.tracked_moves;
    r->precopies = b.precopies;
    r->precopies_used = b.precopies_used;
    r->learned_prefetches = b.learned_prefetches;
    r->failed_moves = b.failed_moves;
    r->to_host_gbps = b.to_host_gbps;
    r->to_device_gbps = b.to_device_gbps;
    const pool::PoolStats pool = allocator_->pool().stats(false);
    r->ooms = pool.ooms;
    r->peak_reserved_bytes = pool.peak_reserved_bytes;
    r->peak_live_bytes = pool.peak_live_bytes;
  }

  // Allocates into live_; false with the failure recorded.
  bool allocate(const std::string& where, std::uintptr_t* out, RunResult* r) {
    auto got = allocator_->allocate(bytes_, 0, false);
    if (!got) {
      r->failure = where + ": allocating " + std::to_string(bytes_) + " bytes: " + got.status().message();
      return false;
    }
    *out = got.value();
    live_.push_back(*out);
    return true;
  }

  void release(std::uintptr_t p) {
    if (p == 0) return;
    live_.erase(std::find(live_.begin(), live_.end(), p));
    (void)allocator_->deallocate(p, 0, false);
  }

  // The data each block of a step holds (--data): activations and the
  // gradients beside them share their layer's share of zeros.
  bench::DataSpec spec(int step, int layer, bool gradient) const {
    std::uint32_t zeros = 0;
    if (options_.data == "half-zero") zeros = 128;
    if (options_.data == "mix") zeros = kMixZeros[static_cast<std::size_t>(layer) % std::size(kMixZeros)];
    return {static_cast<std::uint32_t>(step * 4096 + layer * 2 + (gradient ? 1 : 0)), zeros};
  }

  bool launch(const std::string& where, std::uintptr_t in_a, std::uintptr_t in_b, std::uintptr_t out, RunResult* r,
              bench::DataSpec spec_a = {}, bench::DataSpec spec_b = {}, bench::DataSpec spec_out = {}) {
    std::size_t bytes = bytes_;
    std::uint64_t sleep_ns = sleep_ns_;
    std::uint64_t a = bench::pack_spec(spec_a);
    std::uint64_t b = bench::pack_spec(spec_b);
    std::uint64_t o = bench::pack_spec(spec_out);
    std::atomic<std::uint64_t>* wrong = &wrong_words_;
    void* touch_params[] = {&in_a, &in_b, &out, &bytes, &sleep_ns};
    void* data_params[] = {&in_a, &in_b, &out, &bytes, &sleep_ns, &a, &b, &o, &wrong};
    void** params = checks_data_ ? data_params : touch_params;
    if (checks_data_) {
      verified_words_ += ((in_a != 0 ? 1 : 0) + (in_b != 0 ? 1 : 0)) * (bytes_ / sizeof(std::uint32_t));
    }
    pool::Pins pins;
    if (scan_launches_) {
      // What the preload's launch hooks do before the real launch.
      runtime::LaunchUse use;
      scanner_.for_each_word(kernel_, params, nullptr, [&](std::uintptr_t word) {
        (void)allocator_->use_in_launch(word, stream_, &use, &pins, pool::Pool::OnHost::bring_back_later);
      });
      allocator_->end_launch(kernel_, use, stream_);
    }
    const CUresult launched = api().launchKernel(kernel_, 1, 1, 1, 1, 1, 1, 0, stream_, params, nullptr);
    allocator_->release_pins(pins);
    if (launched != CUDA_SUCCESS) r->failure = where + ": launch failed: " + std::to_string(launched);
    return launched == CUDA_SUCCESS;
  }

  bool step(bool hints, int step, RunResult* r) {
    const int layers = options_.layers;
    const std::string prefix = "step " + std::to_string(step) + ", ";
    std::vector<std::uintptr_t> activation(static_cast<std::size_t>(layers), 0);
    for (int i = 0; i < layers; ++i) {
      const std::string where = prefix + "forward layer " + std::to_string(i);
      const auto l = static_cast<std::size_t>(i);
      if (!allocate(where, &activation[l], r)) return false;
      if (!launch(where, i > 0 ? activation[l - 1] : 0, 0, activation[l], r,
                  i > 0 ? spec(step, i - 1, false) : bench::DataSpec{}, {}, spec(step, i, false))) {
        return false;
      }
    }
    std::uintptr_t upper_gradient = 0;
    for (int i = layers - 1; i >= 0; --i) {
      const std::string where = prefix + "backward layer " + std::to_string(i);
      const auto l = static_cast<std::size_t>(i);
      if (hints) {
        // This layer's activation (it may have been evicted since it was
        // hinted) and the next ones' ahead of their kernels.
        for (int k = i; k >= std::max(0, i - options_.prefetch_ahead); --k) {
          const std::uintptr_t a = activation[static_cast<std::size_t>(k)];
          const util::Status s = allocator_->pool().make_resident(a, bytes_, reinterpret_cast<std::uintptr_t>(stream_));
          // No room is not an error: a kernel still reads the pages where they lie.
          if (s.error() == util::Error::out_of_memory) {
            ++r->hint_ooms;
          } else if (!s.ok()) {
            r->failure = where + ": make_resident: " + s.message();
            return false;
          }
        }
      }
      std::uintptr_t gradient = 0;
      if (!allocate(where, &gradient, r)) return false;
      if (!launch(where, activation[l], upper_gradient, gradient, r, spec(step, i, false),
                  upper_gradient != 0 ? spec(step, i + 1, true) : bench::DataSpec{}, spec(step, i, true))) {
        return false;
      }
      release(activation[l]);
      activation[l] = 0;
      release(upper_gradient);
      upper_gradient = gradient;
    }
    // The last gradient is read once, so that every block is checked.
    if (checks_data_ && !launch(prefix + "last gradient", upper_gradient, 0, 0, r, spec(step, 0, true))) return false;
    release(upper_gradient);
    return true;
  }

  const driver::Driver& sim_;
  const SimControl& control_;
  CUfunction kernel_;
  const Options& options_;
  std::size_t bytes_;
  std::uint64_t sleep_ns_;
  std::unique_ptr<runtime::Allocator> allocator_;
  residency::LaunchScanner scanner_{sim_.api()};
  bool scan_launches_ = false;
  CUstream stream_ = nullptr;
  std::vector<std::uintptr_t> live_;
  bool checks_data_;
  std::atomic<std::uint64_t> wrong_words_{0};
  std::uint64_t verified_words_ = 0;
};

double mib(double bytes) { return bytes / static_cast<double>(util::MiB); }

// kept: unconstrained mean step time / this run's, over the timed steps;
// steady: the same over their second half, once learn has found the step.
// Columns per timed step (/st) are means over the timed steps; pinned bytes,
// pin calls, copy rates and ooms cover the whole run, warm-up included.
void print_table(const std::vector<RunResult>& runs) {
  std::printf("%-6s %9s %-5s %-4s %8s %6s %6s %11s %10s %9s %9s %8s %9s %10s %5s %5s %8s %8s %5s  %s\n", "budget",
              "budgetMiB", "mode", "zip", "step_ms", "kept", "steady", "evictMiB/st", "prefMiB/st", "busMiB/st",
              "hostrd/st", "gates/st", "pinnedMiB", "pinPeakMiB", "pins", "ratio", "d2h_GBps", "h2d_GBps", "ooms",
              "status");
  for (const RunResult& r : runs) {
    const std::string budget_mib = r.budget_bytes == 0 ? "-" : std::to_string(r.budget_bytes / util::MiB);
    if (!r.completed) {
      std::printf("%-6s %9s %-5s %-4s %8s %6s %6s %11s %10s %9s %9s %8s %9s %10s %5s %5s %8s %8s %5llu  failed: %s\n",
                  r.budget_label.c_str(), budget_mib.c_str(), r.mode.c_str(), r.compress.c_str(), "-", "-", "-", "-",
                  "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", static_cast<unsigned long long>(r.ooms),
                  r.failure.c_str());
      continue;
    }
    std::string status = "ok";
    if (!r.eviction_on) status += " (eviction off: " + r.eviction_off_reason + ")";
    if (r.hint_ooms > 0) status += ", " + std::to_string(r.hint_ooms) + " hints found no room";
    if (r.learned_period > 0) {
      status += ", period " + std::to_string(r.learned_period) + ", " + std::to_string(r.tracked_moves) +
                " tracked moves, " + std::to_string(r.precopies_used) + "/" + std::to_string(r.precopies) +
                " precopies used, " + std::to_string(r.learned_prefetches) + " learned prefetches";
    }
    if (r.fallbacks > 0) status += ", " + std::to_string(r.fallbacks) + " ungated moves";
    if (r.failed_moves > 0) status += ", " + std::to_string(r.failed_moves) + " failed moves";
    if (r.compress != "off" && !r.compressing) status += ", compression off";
    if (r.raw_by_sample_pages > 0) status += ", " + std::to_string(r.raw_by_sample_pages) + " pages raw by sample";
    if (r.verified_words > 0) status += ", " + std::to_string(r.verified_words) + " words verified";
    char waits[96];
    std::snprintf(waits, sizeof waits, ", waited %.1f ms/st, codec %.1f ms/st", r.wait_ms_per_step,
                  r.codec_ms_per_step);
    status += waits;
    std::printf(
        "%-6s %9s %-5s %-4s %8.1f %6.3f %6.3f %11.1f %10.1f %9.1f %9.1f %8.1f %9.1f %10.1f %5llu %5.2f %8.2f %8.2f "
        "%5llu  %s\n",
        r.budget_label.c_str(), budget_mib.c_str(), r.mode.c_str(), r.compress.c_str(), r.mean_step_ms,
        r.throughput_kept, r.steady_kept, mib(r.evicted_bytes_per_step), mib(r.prefetched_bytes_per_step),
        mib(r.bus_bytes_per_step), r.host_read_launches_per_step, r.gates_per_step,
        mib(static_cast<double>(r.host_cache_bytes)), mib(static_cast<double>(r.host_cache_peak_bytes)),
        static_cast<unsigned long long>(r.pin_calls), r.compression_ratio, r.to_host_gbps, r.to_device_gbps,
        static_cast<unsigned long long>(r.ooms), status.c_str());
  }
}

nlohmann::json run_json(const RunResult& r) {
  nlohmann::json j = {{"budget", r.budget_label},       {"budget_fraction", r.budget_fraction},
                      {"budget_bytes", r.budget_bytes}, {"mode", r.mode},
                      {"compress", r.compress},         {"completed", r.completed},
                      {"eviction_on", r.eviction_on}};
  if (!r.completed) {
    j["failure"] = r.failure;
    j["ooms"] = r.ooms;
    return j;
  }
  if (!r.eviction_on) j["eviction_off_reason"] = r.eviction_off_reason;
  j.update({{"step_ms", r.step_ms},
            {"mean_step_ms", r.mean_step_ms},
            {"throughput_kept", r.throughput_kept},
            {"steady_step_ms", r.steady_step_ms},
            {"steady_throughput_kept", r.steady_kept},
            {"evicted_bytes_per_step", r.evicted_bytes_per_step},
            {"prefetched_bytes_per_step", r.prefetched_bytes_per_step},
            {"evictions_per_step", r.evictions_per_step},
            {"prefetches_per_step", r.prefetches_per_step},
            {"gates_per_step", r.gates_per_step},
            {"host_read_launches_per_step", r.host_read_launches_per_step},
            {"hint_ooms", r.hint_ooms},
            {"host_cache_bytes", r.host_cache_bytes},
            {"host_cache_peak_bytes", r.host_cache_peak_bytes},
            {"pin_calls", r.pin_calls},
            {"gates", r.gates},
            {"fallbacks", r.fallbacks},
            {"learned_period", r.learned_period},
            {"tracked_moves", r.tracked_moves},
            {"precopies", r.precopies},
            {"precopies_used", r.precopies_used},
            {"learned_prefetches", r.learned_prefetches},
            {"failed_moves", r.failed_moves},
            {"to_host_gbps", r.to_host_gbps},
            {"to_device_gbps", r.to_device_gbps},
            {"ooms", r.ooms},
            {"peak_reserved_bytes", r.peak_reserved_bytes},
            {"peak_live_bytes", r.peak_live_bytes},
            {"bus_bytes_per_step", r.bus_bytes_per_step},
            {"compressing", r.compressing},
            {"compressed_pages", r.compressed_pages},
            {"raw_by_sample_pages", r.raw_by_sample_pages},
            {"compression_ratio", r.compression_ratio},
            {"verified_words", r.verified_words},
            {"wait_ms_per_step", r.wait_ms_per_step},
            {"codec_ms_per_step", r.codec_ms_per_step}});
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "Eviction under a device budget on the simulated driver: a layer-by-layer training step run unconstrained, "
      "then at 100%, 50% and 33% of its peak reserved bytes, in each prefetch mode (off, hints, launch, learn)."};
  tidepool::bench::add_step_options(app, o);
  app.add_option("--prefetch-ahead", o.prefetch_ahead, "hints mode: activations hinted ahead of the layer reading them")
      ->check(CLI::Range(0, 1000));
  app.add_option("--learn-ahead", o.learn_ahead, "learn mode: launches a block is brought back ahead of its use")
      ->check(CLI::Range(1, 1000));
  app.add_option("--modes", o.modes, "Prefetch modes to run under each budget")
      ->check(CLI::IsMember({"off", "hints", "launch", "learn"}))
      ->delimiter(',');
  app.add_option("--budgets", o.budget_percents, "Budgets, in percent of the unconstrained peak reserved bytes")
      ->check(CLI::Range(1.0, 1000.0))
      ->delimiter(',');
  app.add_option("--json", o.json, "Also write the results as JSON here");
  app.add_option("--data", o.data,
                 "What blocks hold: touch (a word a page), dense, half-zero or mix (verified in full)")
      ->check(CLI::IsMember({"touch", "dense", "half-zero", "mix"}));
  app.add_option("--compress", o.compress, "compress settings to run each budget and mode with")
      ->check(CLI::IsMember({"off", "zero", "auto"}))
      ->delimiter(',');
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  auto opened = driver::Driver::open(TIDEPOOL_SIM_LIBRARY);
  if (!opened) {
    std::fprintf(stderr, "bench_residency: cannot open the sim driver at %s: %s\n", TIDEPOOL_SIM_LIBRARY,
                 opened.status().message());
    return 1;
  }
  const driver::Driver& sim = *opened.value();
  SimControl control;
  control.register_kernel = sim_symbol<decltype(control.register_kernel)>(sim, "tidepool_sim_register_kernel");
  control.set_copy_gbps = sim_symbol<decltype(control.set_copy_gbps)>(sim, "tidepool_sim_set_copy_gbps");
  control.host_resident_launches =
      sim_symbol<decltype(control.host_resident_launches)>(sim, "tidepool_sim_host_resident_launches");
  control.copied_bytes = sim_symbol<decltype(control.copied_bytes)>(sim, "tidepool_sim_copied_bytes");
  if (control.register_kernel == nullptr) {
    std::fprintf(stderr, "bench_residency: the sim does not export tidepool_sim_register_kernel\n");
    return 1;
  }
  bool copy_gbps_applied = false;
  if (control.set_copy_gbps != nullptr) {
    control.set_copy_gbps(o.copy_gbps);
    copy_gbps_applied = true;
  } else {
    std::printf("note: the sim does not export tidepool_sim_set_copy_gbps: copies run unthrottled\n");
  }
  if (control.host_resident_launches == nullptr) {
    std::printf("note: the sim does not export tidepool_sim_host_resident_launches: hostrd/st reads 0\n");
  }
  CUfunction kernel = nullptr;
  const std::size_t param_sizes[] = {sizeof(std::uintptr_t), sizeof(std::uintptr_t), sizeof(std::uintptr_t),
                                     sizeof(std::size_t), sizeof(std::uint64_t)};
  const std::size_t data_param_sizes[] = {sizeof(std::uintptr_t), sizeof(std::uintptr_t), sizeof(std::uintptr_t),
                                          sizeof(std::size_t),    sizeof(std::uint64_t),  sizeof(std::uint64_t),
                                          sizeof(std::uint64_t),  sizeof(std::uint64_t),  sizeof(void*)};
  const bool data = o.data != "touch";
  if (control.register_kernel(&kernel, data ? &bench::data_layer_kernel : &bench::layer_kernel, nullptr,
                              data ? std::size(data_param_sizes) : std::size(param_sizes),
                              data ? data_param_sizes : param_sizes) != CUDA_SUCCESS) {
    std::fprintf(stderr, "bench_residency: cannot register the layer kernel\n");
    return 1;
  }

  char copies[64] = "unlimited (not settable)";
  if (copy_gbps_applied && o.copy_gbps > 0) {
    std::snprintf(copies, sizeof copies, "%g GB/s", o.copy_gbps);
  } else if (copy_gbps_applied) {
    std::snprintf(copies, sizeof copies, "unlimited");
  }
  std::printf(
      "bench_residency: %d layers, %g MiB activations, %g ms kernels, %d steps (1 warm-up), copies at %s, "
      "hints %d ahead, data %s\n",
      o.layers, o.activation_mib, o.kernel_ms, o.steps, copies, o.prefetch_ahead, o.data.c_str());
  std::fflush(stdout);

  Workload workload(sim, control, kernel, o);
  std::vector<RunResult> runs;
  RunResult baseline = workload.run(0, "off");
  baseline.budget_label = "none";
  if (!baseline.completed) {
    runs.push_back(baseline);
    print_table(runs);
    std::fprintf(stderr, "bench_residency: the unconstrained run failed: %s\n", baseline.failure.c_str());
    return 1;
  }
  baseline.throughput_kept = 1.0;
  baseline.steady_kept = 1.0;
  runs.push_back(baseline);
  const std::size_t peak = baseline.peak_reserved_bytes;
  for (const double percent : o.budget_percents) {
    const double fraction = percent / 100.0;
    char label[32];
    std::snprintf(label, sizeof label, "%.0f%%", percent);
    for (const std::string& mode : o.modes) {
      for (const std::string& compress : o.compress) {
        if (compress != "off" && mode != "launch" && mode != "learn") continue;  // it needs the launch scan
        RunResult r = workload.run(static_cast<std::size_t>(static_cast<double>(peak) * fraction), mode, compress);
        r.budget_label = label;
        r.budget_fraction = fraction;
        if (r.completed) {
          r.throughput_kept = baseline.mean_step_ms / r.mean_step_ms;
          r.steady_kept = baseline.steady_step_ms / r.steady_step_ms;
        }
        runs.push_back(r);
      }
    }
  }
  std::printf("unconstrained peak reserved %.1f MiB, peak live %.1f MiB\n",
              mib(static_cast<double>(baseline.peak_reserved_bytes)),
              mib(static_cast<double>(baseline.peak_live_bytes)));
  print_table(runs);

  if (!o.json.empty()) {
    nlohmann::json results = nlohmann::json::array();
    for (const RunResult& r : runs) results.push_back(run_json(r));
    const nlohmann::json j = {{"layers", o.layers},
                              {"activation_mib", o.activation_mib},
                              {"kernel_ms", o.kernel_ms},
                              {"steps", o.steps},
                              {"timed_steps", o.steps - 1},
                              {"copy_gbps", o.copy_gbps},
                              {"copy_gbps_applied", copy_gbps_applied},
                              {"prefetch_ahead", o.prefetch_ahead},
                              {"data", o.data},
                              {"unconstrained_peak_reserved_bytes", baseline.peak_reserved_bytes},
                              {"unconstrained_peak_live_bytes", baseline.peak_live_bytes},
                              {"runs", results}};
    std::ofstream out(o.json);
    out << j.dump(2) << "\n";
    if (!out) {
      std::fprintf(stderr, "bench_residency: cannot write %s\n", o.json.c_str());
      return 1;
    }
  }
  return 0;
}
