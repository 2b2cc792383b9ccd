// The replay engine: feeds a trace's events to a Target and measures what
// DESIGN.md's metrics say, at every event and at the live peak, and per
// training step (steps.hpp) the driver calls the target made.
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

// One step of the trace (steps.hpp): its events and what the target did in them.
struct StepResult {
  std::uint64_t begin = 0;  // event indices [begin, end)
  std::uint64_t end = 0;
  std::uint64_t events = 0;
  DriverCalls calls;                  // made during the step's events
  std::uint64_t peak_live_bytes = 0;  // the highest within the step
  std::uint64_t peak_reserved_bytes = 0;
};

struct Result {
  std::string trace;
  std::string policy;
  FreeMode frees = FreeMode::stream;
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
  DriverCalls driver_calls;       // over the whole trace: the sum of the steps'
  std::vector<StepResult> steps;  // the first holds the setup; the last is the last training step
  std::vector<Sample> timeline;   // a few thousand points at most
  std::vector<Span> peak_layout;  // filled when asked for
};

// Loads every event of a trace; false with `error` (file:line: reason). A
// cut-short last line is skipped and its warning (file:line: warning: ...)
// handed to `warning`, or written to stderr when `warning` is null.
bool load_trace(const std::string& path, std::vector<TraceEvent>* events, std::string* error,
                std::string* warning = nullptr);

struct ReplayOptions {
  bool want_layout = false;  // capture the layout at the live peak (costs a second pass)
  bool progress = false;     // a progress bar on stderr
  std::size_t timeline_points = 2000;
  std::size_t step_count = 0;  // split into this many steps (split_steps); 0: detect them (detect_steps)
};

// Replays `events` against the target made by `make`; false with `error` on
// bad input or when the target cannot start. Bad input, whoever built the
// events: a pointer allocated twice, a free of an unknown pointer, a free
// whose size is neither 0 (not recorded) nor its allocation's, an allocate
// or free over runtime::kMaxTraceSize. A free of an allocation the target
// refused is skipped; a refused request over kMaxTraceSize counts as failed
// without asking the target.
bool run_replay(const std::string& trace_name, const std::vector<TraceEvent>& events, const std::string& policy,
                const TargetOptions& target_options, const ReplayOptions& options, Result* result, std::string* error);

}  // namespace tidepool::replay
