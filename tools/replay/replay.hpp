// The replay engine: feeds a trace's events to a Target and measures what
// DESIGN.md's metrics say, at every event and at the live peak.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "target.hpp"
#include "trace_reader.hpp"

namespace tidepool::replay {

struct Sample {
  std::uint64_t time_us;
  std::uint64_t live_bytes;
  std::uint64_t reserved_bytes;
};

struct Result {
  std::string trace;
  std::string policy;
  std::uint64_t events = 0;
  std::uint64_t peak_live_bytes = 0;
  std::uint64_t peak_reserved_bytes = 0;
  double utilization = 0;
  double external_fragmentation_at_peak = 0;
  std::uint64_t internal_waste_at_peak = 0;
  std::uint64_t failed_allocations = 0;
  std::uint64_t maps = 0;
  std::uint64_t unmaps = 0;
  std::uint64_t evicted_bytes = 0;
  double ns_per_event = 0;
  std::vector<Sample> timeline;  // a few thousand points at most
  std::vector<Span> peak_layout; // filled when asked for
};

// Loads every event of a trace; false with `error` (file:line: reason).
bool load_trace(const std::string& path, std::vector<TraceEvent>* events, std::string* error);

struct ReplayOptions {
  bool want_layout = false;       // capture the layout at the live peak (costs a second pass)
  bool progress = false;          // a progress bar on stderr
  std::size_t timeline_points = 2000;
};

// Replays `events` against the target made by `make`; false with `error` on
// bad input (a free of an unknown pointer) or when the target cannot start.
bool run_replay(const std::string& trace_name, const std::vector<TraceEvent>& events, const std::string& policy,
                const TargetOptions& target_options, const ReplayOptions& options, Result* result,
                std::string* error);

}  // namespace tidepool::replay
