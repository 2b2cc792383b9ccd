// DriverCalls: the driver calls an allocator made, by kind, as counted by the
// simulated driver. Owns which driver function each count means and the
// names reports use for them; the replay targets and bench_live_replay share
// it so both speak of the same calls in the same words.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tidepool::replay {

struct DriverCalls {
  std::uint64_t creates = 0;        // cuMemCreate
  std::uint64_t maps = 0;           // cuMemMap
  std::uint64_t set_access = 0;     // cuMemSetAccess
  std::uint64_t unmaps = 0;         // cuMemUnmap
  std::uint64_t releases = 0;       // cuMemRelease
  std::uint64_t context_syncs = 0;  // cuCtxSynchronize: the whole device waited for
  std::uint64_t stream_syncs = 0;   // cuStreamSynchronize
  std::uint64_t event_records = 0;  // cuEventRecord
  std::uint64_t event_queries = 0;  // cuEventQuery
  std::uint64_t event_syncs = 0;    // cuEventSynchronize
  std::uint64_t stream_waits = 0;   // cuStreamWaitEvent
  std::uint64_t mem_allocs = 0;     // cuMemAlloc_v2 reaching the driver (not the pool)

  // The virtual-memory calls that cost tens to hundreds of microseconds each on a GPU.
  [[nodiscard]] std::uint64_t vmm() const { return creates + maps + set_access + unmaps + releases; }
  // Host waits on a stream or the whole device.
  [[nodiscard]] std::uint64_t syncs() const { return context_syncs + stream_syncs; }
  // Event calls, event waits included.
  [[nodiscard]] std::uint64_t events() const { return event_records + event_queries + event_syncs + stream_waits; }

  DriverCalls& operator+=(const DriverCalls& other);
  DriverCalls& operator-=(const DriverCalls& other);
  friend DriverCalls operator-(DriverCalls a, const DriverCalls& b) { return a -= b; }
  friend DriverCalls operator+(DriverCalls a, const DriverCalls& b) { return a += b; }
  friend bool operator==(const DriverCalls&, const DriverCalls&) = default;
};

// (report key, count) for every field, in declaration order.
std::vector<std::pair<std::string, std::uint64_t>> named_counts(const DriverCalls& calls);

// What the sim has counted since the process started: `count` is the sim's
// tidepool_sim_call_count (linked, or found with dlsym on the driver handle).
using SimCallCount = std::uint64_t (*)(const char* name);
DriverCalls read_sim_calls(SimCallCount count);

}  // namespace tidepool::replay
