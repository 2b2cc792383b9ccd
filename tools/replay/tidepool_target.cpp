// tidepool's own pool as a replay target: an Allocator over the simulated
// driver, with trace streams mapped to real sim streams. Its driver calls are
// the sim's own counts, taken relative to the moment the target was made.
// The target tells the allocator of every stream it creates and marks the
// stream registry complete, as the preload does, so `device` frees are
// fenced as they are under the preload.
//
// Streams are bounded (TargetOptions::stream_limit): every sim stream is a
// worker thread, and a trace may name thousands of stream ids. The first ids
// each get a stream of their own, so traces with fewer ids replay exactly as
// the program's streams; later ids share those streams round-robin. An id
// always maps to the same stream, so what the replay orders per id (an id's
// frees before its own reuse, immediately, without an event) still holds;
// two ids that share a stream are one stream to the pool, which reuses
// between them without the event a distinct stream would wait on.
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <filesystem>
#include <unordered_map>
#include <vector>

#include "pool/pool.hpp"
#include "runtime/runtime.hpp"
#include "target.hpp"

namespace tidepool::replay {

namespace {

// The sim next to the installed tool, else the one in the build tree.
std::string sim_path() {
  if (const char* env = std::getenv("TIDEPOOL_SIM_LIBRARY"); env != nullptr && *env != '\0') return env;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto installed = exe.parent_path().parent_path() / "lib" / "tidepool" / "sim" / "libcuda.so.1";
    if (std::filesystem::exists(installed, ec)) return installed.string();
  }
  return TIDEPOOL_BUILD_SIM_LIBRARY;
}

const driver::Driver* sim_driver(std::string* error) {
  static std::unique_ptr<driver::Driver> driver;
  static std::string failure;
  static bool tried = false;
  if (!tried) {
    tried = true;
    auto opened = driver::Driver::open(sim_path());
    if (opened) {
      driver = std::move(opened.value());
      // Replays need room, not realism: the sim commits nothing until touched.
      using SetCapacity = void (*)(std::size_t);
      if (auto set = reinterpret_cast<SetCapacity>(::dlsym(driver->handle(), "tidepool_sim_set_capacity"))) {
        set(static_cast<std::size_t>(kReplayDeviceBytes));
      }
    } else {
      failure = std::string("cannot open the simulated driver: ") + opened.status().message();
    }
  }
  if (!driver && error != nullptr) *error = failure;
  return driver.get();
}

// Without lag the replay launches no work: fences are finished once recorded,
// every run alike, rather than whenever the sim's stream threads get to them.
// With lag they finish when the work queued before them has.
void set_fences_finish_when_recorded(const driver::Driver& driver, bool at_once) {
  using SetRecordsWait = void (*)(int);
  if (auto set = reinterpret_cast<SetRecordsWait>(::dlsym(driver.handle(), "tidepool_sim_set_records_wait"))) {
    set(at_once ? 1 : 0);
  }
}

using RunFor = CUresult (*)(std::uint64_t);
using SetVirtualClock = void (*)(int);
using AdvanceClock = void (*)(std::uint64_t);

// The sim's virtual clock as a lagging target drives it; all null without
// one (no lag, or --wall-clock).
struct VirtualClock {
  SetVirtualClock set = nullptr;
  AdvanceClock advance = nullptr;
  std::uint64_t host_ns = 0;  // moved on by this much per trace event
};

// The work a lagging device runs after each allocation: it writes the block's
// first bytes (so reuse under queued work would show) and holds its stream
// for the lag (`user`: the sim's tidepool_sim_run_for, on the virtual clock
// when it is on, else spinning).
void write_and_hold(void** params, void* user) {
  const auto address = *static_cast<CUdeviceptr*>(params[0]);
  const auto bytes = *static_cast<std::uint64_t*>(params[1]);
  const auto hold = *static_cast<std::int64_t*>(params[2]);
  std::memset(reinterpret_cast<void*>(address), 0x5a, std::min<std::uint64_t>(bytes, 8));
  (void)reinterpret_cast<RunFor>(user)(static_cast<std::uint64_t>(hold));
}

// write_and_hold as a sim kernel, registered once; null when the driver is
// not the sim.
CUfunction lag_kernel(const driver::Driver& driver) {
  static CUfunction kernel = [&driver] {
    using Register = CUresult (*)(CUfunction*, void (*)(void**, void*), void*, int, const std::size_t*);
    auto reg = reinterpret_cast<Register>(::dlsym(driver.handle(), "tidepool_sim_register_kernel"));
    auto run_for = ::dlsym(driver.handle(), "tidepool_sim_run_for");
    CUfunction f = nullptr;
    const std::size_t sizes[] = {sizeof(CUdeviceptr), sizeof(std::uint64_t), sizeof(std::int64_t)};
    if (reg == nullptr || run_for == nullptr || reg(&f, &write_and_hold, run_for, 3, sizes) != CUDA_SUCCESS) {
      f = nullptr;
    }
    return f;
  }();
  return kernel;
}

// The sim's call counter, or null when the driver is not the sim.
SimCallCount sim_call_count(const driver::Driver& driver) {
  return reinterpret_cast<SimCallCount>(::dlsym(driver.handle(), "tidepool_sim_call_count"));
}

class TidepoolTarget final : public Target {
 public:
  TidepoolTarget(std::string policy, std::unique_ptr<runtime::Allocator> allocator, FreeMode frees,
                 std::size_t stream_limit, SimCallCount count, DriverCalls calls_before, CUfunction lag_kernel,
                 double lag_us, VirtualClock clock)
      : policy_(std::move(policy)),
        allocator_(std::move(allocator)),
        frees_(frees),
        stream_limit_(std::max<std::size_t>(1, stream_limit)),
        count_(count),
        calls_before_(calls_before),
        lag_kernel_(lag_kernel),
        lag_ns_(static_cast<std::int64_t>(lag_us * 1000.0)),
        clock_(clock) {
    // Every stream of this process that the pool may meet is made by
    // stream_for(), which registers it: the registry is complete.
    allocator_->streams().set_complete(true);
    if (clock_.set != nullptr) clock_.set(1);
  }
  ~TidepoolTarget() override {
    const driver::Api& api = sim_driver(nullptr)->api();
    driver::ScopedContext scope(api, allocator_->context());
    if (lag_kernel_ != nullptr) (void)api.ctxSynchronize();  // the lag's work touches the pool's pages
    allocator_.reset();
    if (clock_.set != nullptr) clock_.set(0);
    if (lag_event_ != nullptr) (void)api.eventDestroy(lag_event_);
    for (CUstream stream : made_) {
      if (stream != nullptr) api.streamDestroy(stream);
    }
  }

  std::string name() const override { return policy_; }

  bool allocate(std::uint64_t size, std::uint64_t stream, std::uint64_t* address) override {
    host_step();
    const std::uintptr_t on = frees_ == FreeMode::device ? 0 : stream_for(stream);
    auto result = allocator_->allocate(size, on, /*ordered=*/frees_ == FreeMode::stream);
    if (!result) return false;
    *address = result.value();
    if (lag_kernel_ != nullptr && *address != 0) {
      // The replay's own work, counted as no driver call of the target's
      // (the sim does not count launches).
      CUdeviceptr block = *address;
      std::uint64_t bytes = size;
      std::int64_t spin = lag_ns_;
      void* params[] = {&block, &bytes, &spin};
      const driver::Api& api = sim_driver(nullptr)->api();
      driver::ScopedContext scope(api, allocator_->context());
      (void)api.launchKernel(lag_kernel_, 1, 1, 1, 1, 1, 1, 0, reinterpret_cast<CUstream>(on), params, nullptr);
      if (frees_ == FreeMode::stream) lag_streams_[*address] = on;
    }
    return true;
  }
  void free(std::uint64_t address, std::uint64_t stream) override {
    host_step();
    if (frees_ == FreeMode::device) {
      (void)allocator_->deallocate(address, 0, /*ordered=*/false);
      return;
    }
    const std::uintptr_t on = stream_for(stream);
    if (lag_kernel_ != nullptr) order_lag_before_free(address, on);
    (void)allocator_->deallocate(address, on, /*ordered=*/true);
  }
  // What the target itself asked of the driver: the replay's own ordering
  // of its lag work is none of it.
  DriverCalls driver_calls() const override { return read_sim_calls(count_) - calls_before_ - own_calls_; }
  Counters counters() const override {
    const pool::PoolStats s = allocator_->pool().stats(false);
    return Counters{s.live_bytes, s.handed_out_bytes, s.reserved_bytes, s.maps, s.unmaps, 0};
  }
  Fragmentation fragmentation() const override {
    const pool::PoolStats s = allocator_->pool().stats(true);
    return Fragmentation{s.largest_free_block, s.free_bytes};
  }
  std::vector<Span> layout() const override {
    // Only what is backed by physical pages: the rest of a segment is VA.
    std::vector<Span> spans;
    std::uint64_t offset = 0;
    for (const pool::BlockView& b : allocator_->pool().snapshot()) {
      if (!b.backed && b.requested == 0) continue;
      spans.push_back(Span{offset, b.size, b.requested != 0});
      offset += b.size;
    }
    return spans;
  }

 private:
  // The host's time per trace event, on the virtual clock.
  void host_step() {
    if (clock_.advance != nullptr) clock_.advance(clock_.host_ns);
  }
  // A block freed on another stream than the one its lag work was queued on:
  // that work is the replay's, not the program's, so the replay orders the
  // free after it, as the program ordered its own work (an event the freeing
  // stream waits on). Otherwise the pool could hand the block out while the
  // lag's write to it is still queued.
  void order_lag_before_free(std::uint64_t address, std::uintptr_t freeing) {
    auto it = lag_streams_.find(address);
    if (it == lag_streams_.end()) return;
    const std::uintptr_t queued_on = it->second;
    lag_streams_.erase(it);
    if (queued_on == freeing) return;
    const driver::Api& api = sim_driver(nullptr)->api();
    driver::ScopedContext scope(api, allocator_->context());
    if (lag_event_ == nullptr && api.eventCreate(&lag_event_, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
      lag_event_ = nullptr;
    }
    if (lag_event_ != nullptr && api.eventRecord(lag_event_, reinterpret_cast<CUstream>(queued_on)) == CUDA_SUCCESS &&
        api.streamWaitEvent(reinterpret_cast<CUstream>(freeing), lag_event_, 0) == CUDA_SUCCESS) {
      own_calls_.event_records++;
      own_calls_.stream_waits++;
      return;
    }
    (void)api.streamSynchronize(reinterpret_cast<CUstream>(queued_on));  // the sim failed: order it the slow way
    own_calls_.stream_syncs++;
  }

  std::uintptr_t stream_for(std::uint64_t id) {
    if (id == 0) return 0;  // the legacy default stream
    auto [it, fresh] = streams_.try_emplace(id, nullptr);
    if (!fresh) return reinterpret_cast<std::uintptr_t>(it->second);
    if (made_.size() >= stream_limit_) {
      it->second = made_[(streams_.size() - 1) % stream_limit_];
      return reinterpret_cast<std::uintptr_t>(it->second);
    }
    const driver::Api& api = sim_driver(nullptr)->api();
    driver::ScopedContext scope(api, allocator_->context());
    CUstream s = nullptr;
    if (api.streamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) s = nullptr;
    if (s != nullptr) allocator_->stream_created(s);
    made_.push_back(s);
    it->second = s;
    return reinterpret_cast<std::uintptr_t>(s);
  }

  std::string policy_;
  std::unique_ptr<runtime::Allocator> allocator_;
  FreeMode frees_;
  std::size_t stream_limit_;
  SimCallCount count_;
  DriverCalls calls_before_;
  CUfunction lag_kernel_;  // null: no lag
  std::int64_t lag_ns_;
  VirtualClock clock_;
  std::unordered_map<std::uint64_t, std::uintptr_t> lag_streams_;  // live block -> the stream its lag work is on
  CUevent lag_event_ = nullptr;
  DriverCalls own_calls_;                                // calls the replay made for its lag work
  std::unordered_map<std::uint64_t, CUstream> streams_;  // trace id -> its stream (maybe shared)
  std::vector<CUstream> made_;                           // the streams this target created, in order
};

}  // namespace

std::unique_ptr<Target> make_tidepool_target(const std::string& policy, const TargetOptions& options,
                                             std::string* error) {
  const bool lagging = options.lag_us > 0;
  const driver::Driver* driver = sim_driver(error);
  if (driver == nullptr) return nullptr;
  set_fences_finish_when_recorded(*driver, !lagging);
  CUfunction kernel = nullptr;
  VirtualClock clock;
  if (lagging) {
    kernel = lag_kernel(*driver);
    if (kernel == nullptr) {
      *error = "--lag-us: the simulated driver cannot run the lag's work (tidepool_sim_register_kernel)";
      return nullptr;
    }
    if (options.host_us >= 0) {
      clock.set = reinterpret_cast<SetVirtualClock>(::dlsym(driver->handle(), "tidepool_sim_set_virtual_clock"));
      clock.advance = reinterpret_cast<AdvanceClock>(::dlsym(driver->handle(), "tidepool_sim_advance_clock"));
      if (clock.set == nullptr || clock.advance == nullptr) {
        *error = "--lag-us: the simulated driver has no virtual clock (tidepool_sim_set_virtual_clock)";
        return nullptr;
      }
      clock.host_ns = static_cast<std::uint64_t>(options.host_us * 1000.0);
    }
  }
  runtime::Config config = runtime::parse_config(options.conf);
  if (config.passthrough) {
    *error = config.error;
    return nullptr;
  }
  // A budget in a replay is there to make allocations fail, and the table
  // counts them: the out-of-memory warnings would only bury the results.
  // A log key in --conf is the user's to choose.
  if (options.conf.find("log:") == std::string::npos && options.conf.find("log :") == std::string::npos) {
    runtime::logger().set_level(spdlog::level::err);
  } else {
    runtime::configure_logging(config);
  }
  runtime::AllocatorOptions allocator_options;
  allocator_options.pool.policy = policy;
  allocator_options.pool.small_size = static_cast<std::size_t>(config.small_size);
  allocator_options.pool.hold_slack_percent = config.hold_slack;
  // The replay device's memory bounds the pool as it bounds the baselines
  // (the sim's capacity); a smaller limit is a budget.
  const std::uint64_t limit = device_limit_of(options);
  if (limit < kReplayDeviceBytes) allocator_options.device_limit = static_cast<std::size_t>(limit);
  // Counted from before the allocator exists: what creating it costs is the target's too.
  const SimCallCount count = sim_call_count(*driver);
  const DriverCalls before = read_sim_calls(count);
  auto created = runtime::Allocator::create(*driver, allocator_options);
  if (!created) {
    *error = std::string("cannot create the pool: ") + created.status().message();
    return nullptr;
  }
  return std::make_unique<TidepoolTarget>(policy, std::move(created.value()), options.frees, options.stream_limit,
                                          count, before, kernel, options.lag_us, clock);
}

const char* free_mode_name(FreeMode mode) { return mode == FreeMode::device ? "device" : "stream"; }

bool parse_free_mode(const std::string& name, FreeMode* mode) {
  if (name == "stream") {
    *mode = FreeMode::stream;
  } else if (name == "device") {
    *mode = FreeMode::device;
  } else {
    return false;
  }
  return true;
}

std::uint64_t device_limit_of(const TargetOptions& options, bool* given) {
  std::uint64_t limit = options.device_memory;
  if (limit == 0) {
    const runtime::Config config = runtime::parse_config(options.conf);
    if (!config.passthrough && config.device_limit) {
      limit = static_cast<std::uint64_t>(config.device_limit->resolve(kReplayDeviceBytes));
    }
  }
  if (given != nullptr) *given = limit != 0;
  return limit == 0 ? kReplayDeviceBytes : std::min(limit, kReplayDeviceBytes);
}

std::vector<std::string> target_names() {
  std::vector<std::string> names;
  for (std::string_view p : pool::policy_names()) names.emplace_back(p);
  names.insert(names.end(), {"pytorch_rules", "rmm_pool", "cuda_malloc"});
  return names;
}

std::unique_ptr<Target> make_target(const std::string& name, const TargetOptions& options, std::string* error) {
  // The baselines under the replay's one device limit, as tidepool's policies.
  if (name == "pytorch_rules") return make_pytorch_rules_target(device_limit_of(options));
  if (name == "rmm_pool") return make_rmm_pool_target(device_limit_of(options));
  if (name == "cuda_malloc") return make_cuda_malloc_target(device_limit_of(options));
  if (pool::make_policy(name) != nullptr) return make_tidepool_target(name, options, error);
  *error = "unknown policy \"" + name + "\"";
  return nullptr;
}

}  // namespace tidepool::replay
