// The replay engine: feeds a trace's events to a Target and measures what
// DESIGN.md's metrics say, at every event and at the live peak, and per
// training step (steps.hpp) the driver calls the target made.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "allocation_view.hpp"
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
  std::uint64_t begin_us = 0;  // the trace's time at its first event
  std::uint64_t events = 0;
  DriverCalls calls;                  // made during the step's events
  std::uint64_t peak_live_bytes = 0;  // the highest within the step
  std::uint64_t peak_reserved_bytes = 0;
};

// One allocation the target placed, from its allocate to its free, in the
// trace's own clock. Recorded only when ReplayOptions::record_allocations.
struct Lifetime {
  std::uint64_t begin_us = 0;
  std::uint64_t end_us = 0;   // meaningful when `freed`
  std::uint64_t address = 0;  // where the target placed it
  std::uint64_t size = 0;     // requested bytes
  std::uint64_t stream = 0;   // the trace's stream id
  std::uint64_t line = 0;     // the allocate's line in the trace
  bool freed = false;         // false: still live when the trace ends
};

// An allocation the target refused (an out-of-memory), with what the target
// held just after refusing it.
struct FailedAllocation {
  std::uint64_t time_us = 0;
  std::uint64_t size = 0;
  std::uint64_t stream = 0;
  std::uint64_t line = 0;
  std::uint64_t live_bytes = 0;
  std::uint64_t reserved_bytes = 0;
};

// The device budget from `time_us` on (0: none).
struct BudgetChange {
  std::uint64_t time_us = 0;
  std::uint64_t bytes = 0;
};

// The pool at one moment of the trace, for the report's time slider: its
// layout with neighbouring blocks of the same kind (used or free) merged, so
// that a moment costs twice its free blocks, whatever the live count.
struct LayoutMoment {
  std::uint64_t time_us = 0;
  std::uint64_t live_bytes = 0;
  std::uint64_t reserved_bytes = 0;
  std::vector<Span> layout;
};

struct Result {
  std::string trace;
  std::string policy;
  FreeMode frees = FreeMode::stream;
  double lag_us = 0;    // TargetOptions::lag_us (tidepool's policies only)
  double host_us = -1;  // TargetOptions::host_us where lagging on the virtual clock; else -1
  std::uint64_t events = 0;
  std::uint64_t peak_live_bytes = 0;
  std::uint64_t peak_reserved_bytes = 0;
  double utilization = 0;
  double external_fragmentation_at_peak = 0;
  std::uint64_t internal_waste_at_peak = 0;
  std::uint64_t failed_allocations = 0;
  std::uint64_t unknown_frees = 0;  // frees of blocks allocated before the trace began (--lenient)
  std::uint64_t maps = 0;
  std::uint64_t unmaps = 0;
  std::uint64_t evicted_bytes = 0;
  double ns_per_event = 0;
  DriverCalls driver_calls;           // over the whole trace: the sum of the steps'
  std::vector<StepResult> steps;      // the first holds the setup; the last is the last training step
  std::vector<Sample> timeline;       // a few thousand points at most
  std::vector<Span> peak_layout;      // filled when asked for
  std::vector<LayoutMoment> moments;  // evenly spaced through the trace, when the layout is asked for
  // For the Chrome trace and the report's out-of-memory marks. Beyond the
  // caps in ReplayOptions only the count of what was left out grows.
  std::vector<Lifetime> lifetimes;  // in allocation order; when record_allocations
  std::uint64_t lifetimes_dropped = 0;
  std::vector<FailedAllocation> failures;  // always recorded: they are rare, and each is news
  std::uint64_t failures_dropped = 0;
  std::vector<BudgetChange> budget_changes;  // the budget at the first event, when there is one
  // The device limit this target ran under, as every target of the replay
  // (device_limit_of), and whether the user gave it.
  std::uint64_t device_limit_bytes = 0;
  bool device_limit_given = false;
  // The trace's allocations and owners, the same for every target of the
  // trace (shared by their results); null when not computed.
  std::shared_ptr<const AllocationView> allocations;
};

// The last step, the steady state a training loop pays every step from then
// on; an empty one for a result that has none.
StepResult last_step(const Result& result);

// Loads every event of a trace; false with `error` (file:line: reason). A
// cut-short last line is skipped and its warning (file:line: warning: ...)
// handed to `warning`, or written to stderr when `warning` is null.
// `owners` (may be null) receives the Owner column's names, which events'
// `owner` index.
bool load_trace(const std::string& path, std::vector<TraceEvent>* events, std::string* error,
                std::string* warning = nullptr, std::vector<std::string>* owners = nullptr);

struct ReplayOptions {
  bool want_layout = false;         // capture the layout at the live peak and at moments (costs a second pass)
  std::size_t layout_moments = 12;  // how many moments, evenly spaced by event, the second pass captures
  bool progress = false;            // a progress bar on stderr
  std::size_t timeline_points = 2000;
  std::size_t step_count = 0;  // split into this many steps (split_steps); 0: detect them (detect_steps)
  bool lenient = false;        // count and skip frees of unknown pointers instead of refusing the trace
  std::size_t run_index = 0;   // which (trace, policy) run this is, for the progress line
  std::size_t run_count = 1;
  bool record_allocations = false;  // fill Result::lifetimes (the Chrome trace's slices); costs memory per allocation
  std::size_t max_lifetimes = 1'000'000;
  std::size_t max_failures = 100'000;
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
