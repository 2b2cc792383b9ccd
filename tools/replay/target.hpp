// Target: one allocator a trace is replayed against — a tidepool placement
// policy on the sim driver, or a baseline written from another allocator's
// documented rules. Adding one is a class and a line in make_target().
//
// Free modes (TargetOptions::frees) say which calls a trace's events become
// for tidepool: `stream` is cudaMallocAsync/cudaFreeAsync (the pluggable
// allocator, RMM), `device` is cudaMalloc/cudaFree on no stream, the calls
// the preload's cuMemAlloc_v2/cuMemFree_v2 hooks make. Baselines ignore it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "driver_calls.hpp"

namespace tidepool::replay {

struct Counters {
  std::uint64_t live_bytes = 0;        // requested bytes in live blocks
  std::uint64_t handed_out_bytes = 0;  // block bytes in live blocks
  std::uint64_t reserved_bytes = 0;    // device memory held
  std::uint64_t maps = 0;              // driver mappings or allocations made
  std::uint64_t unmaps = 0;
  std::uint64_t evicted_bytes = 0;
};

struct Fragmentation {
  std::uint64_t largest_free_block = 0;
  std::uint64_t free_bytes = 0;  // held but not handed out
};

struct Span {
  std::uint64_t offset;  // from the start of the target's address range
  std::uint64_t size;
  bool used;
};

enum class FreeMode {
  stream,  // allocate(size, stream, ordered=true) / deallocate(address, stream, ordered=true)
  device,  // allocate(size, 0, ordered=false) / deallocate(address, 0, ordered=false)
};

// "stream" / "device"; parse_free_mode is false for anything else.
const char* free_mode_name(FreeMode mode);
bool parse_free_mode(const std::string& name, FreeMode* mode);

// How many sim streams a tidepool target makes at most. Each is a worker
// thread in the sim; a trace may name any number of streams.
inline constexpr std::size_t kDefaultStreamLimit = 128;

// The replay device's memory (the sim's capacity in a replay). Every target
// runs under it when no smaller limit is given, baselines included, so that
// no target can hold what the others may not.
inline constexpr std::uint64_t kReplayDeviceBytes = std::uint64_t{1} << 40;

struct TargetOptions {
  std::uint64_t device_memory = 0;  // a budget (--device-limit); 0: none given
  std::string conf;                 // a TIDEPOOL_CONF string for tidepool targets
  FreeMode frees = FreeMode::stream;
  // Trace stream ids past this many (in order of first use) share the sim
  // streams of the first ones; 0 is read as 1.
  std::size_t stream_limit = kDefaultStreamLimit;
  // How far the device lags (--lag-us): after each allocation a tidepool
  // target queues work of this many microseconds on the allocation's stream
  // (the legacy stream in `device` mode) that writes the block's first bytes,
  // as bench_live_replay's --kernel-us does, and fences finish when the sim's
  // streams get to them. 0: no work is queued and a fence is finished once
  // recorded, every run alike.
  double lag_us = 0;
  // With lag, the host time each trace event takes on the sim's virtual
  // clock (--host-us): the lag's work holds its stream for lag_us of that
  // clock, so which fences have finished when the pool looks is the same on
  // every run. Negative: wall time instead (--wall-clock), the lag's work
  // spinning on the sim's stream threads as bench_live_replay's does.
  double host_us = kDefaultHostMicroseconds;
  static constexpr double kDefaultHostMicroseconds = 1.0;
};

// The largest --lag-us taken: a second per allocation.
inline constexpr double kMaxLagMicroseconds = 1e6;

class Target {
 public:
  virtual ~Target() = default;
  [[nodiscard]] virtual std::string name() const = 0;
  // False when the allocation fails (out of memory).
  virtual bool allocate(std::uint64_t size, std::uint64_t stream, std::uint64_t* address) = 0;
  virtual void free(std::uint64_t address, std::uint64_t stream) = 0;
  [[nodiscard]] virtual Counters counters() const = 0;            // O(1)
  [[nodiscard]] virtual Fragmentation fragmentation() const = 0;  // may walk every block
  [[nodiscard]] virtual std::vector<Span> layout() const = 0;     // the address range, block by block
  // The driver calls made since the target was created (the engine reads it
  // at step boundaries only). A target that counts none reports none.
  [[nodiscard]] virtual DriverCalls driver_calls() const { return {}; }
};

// The one device limit every target of a replay runs under: `device_memory`,
// else a device_limit in `conf` (a percentage of kReplayDeviceBytes), else
// kReplayDeviceBytes. `given` (may be null) tells whether one was given.
std::uint64_t device_limit_of(const TargetOptions& options, bool* given = nullptr);

// tidepool's policies first, then the baselines.
std::vector<std::string> target_names();
// Null with `error` set for an unknown name or a target that cannot start.
std::unique_ptr<Target> make_target(const std::string& name, const TargetOptions& options, std::string* error);

std::unique_ptr<Target> make_tidepool_target(const std::string& policy, const TargetOptions& options,
                                             std::string* error);
// The baselines under `budget` bytes (0: only their address line bounds
// them); make_target gives them device_limit_of(options).
std::unique_ptr<Target> make_pytorch_rules_target(std::uint64_t budget);
std::unique_ptr<Target> make_rmm_pool_target(std::uint64_t budget);
std::unique_ptr<Target> make_cuda_malloc_target(std::uint64_t budget);

}  // namespace tidepool::replay
