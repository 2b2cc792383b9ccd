// Trials: one run of the user's program at one batch size, under the
// preload, and what it showed. TrialRunner owns how a trial is run (the
// environment, the configuration it gives tidepool, where the report and the
// trace go) and how its figures are read back: the report for memory and
// eviction, the trace (or the program's step-marker lines) for step time.
//
// Step time needs nothing from the program: a training step repeats its
// allocations, so the trace's repeating sequence (replay's detect_steps)
// marks where each step begins, and the time between two beginnings is a
// step. The median of those times is the trial's step time; the first
// entry (setup, and the first step where it differs) is never timed.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "command.hpp"

namespace tidepool::advise {

enum class Outcome {
  fits,           // ran to its end
  out_of_memory,  // failed, and the report or its stderr says out-of-memory
  timed_out,      // killed at the timeout: too slow to count as training
  failed,         // failed for another reason: the search stops
};
const char* outcome_name(Outcome outcome) noexcept;

struct Trial {
  int index = 0;  // 1-based, in the order run
  long batch = 0;
  bool eviction = false;
  Outcome outcome = Outcome::failed;
  std::string reason;       // one line, when it did not fit
  std::string stderr_tail;  // the program's last lines, when it failed
  int exit_code = -1;
  int signal = 0;
  double wall_s = 0;

  bool report_found = false;
  std::uint64_t allocations = 0;
  std::uint64_t peak_live_bytes = 0;  // the largest of any device
  std::uint64_t peak_reserved_bytes = 0;
  std::uint64_t device_total_bytes = 0;
  std::uint64_t device_limit_bytes = 0;
  std::uint64_t ooms = 0;
  std::uint64_t evicted_bytes = 0;  // all devices, the whole run
  std::uint64_t prefetched_bytes = 0;
  std::string eviction_state;  // the report's devices[].eviction, when eviction was asked for

  std::size_t steps = 0;    // steps seen (0: none found)
  std::string step_source;  // "trace" or "marker"
  double step_s = 0;        // median step time; 0 when not measured
  double samples_per_s = 0;
  double evicted_per_step = 0;
  double prefetched_per_step = 0;
};

struct TrialSettings {
  CommandTemplate command;
  int steps = 6;  // what {steps} becomes
  double timeout_s = 600;
  std::optional<std::regex> step_marker;
  std::string device_limit;  // the device_limit each trial gets (bytes or a percentage)
  std::string extra_conf;    // the user's own TIDEPOOL_CONF keys, given to every trial
  std::string library;       // the libtidepool.so to preload
  std::string sim_library;   // non-empty: run on the simulated driver
  std::string work_dir;      // each trial's report, trace and output go here
};

class TrialRunner {
 public:
  explicit TrialRunner(TrialSettings settings) : settings_(std::move(settings)) {}

  // Runs the program at `batch`, with eviction (prefetch:learn) or without,
  // and records the trial.
  const Trial& run(long batch, bool eviction);
  // A trial already run at `batch` with the same eviction, if any.
  [[nodiscard]] const Trial* find(long batch, bool eviction) const;
  [[nodiscard]] const std::deque<Trial>& trials() const noexcept { return trials_; }
  [[nodiscard]] const TrialSettings& settings() const noexcept { return settings_; }

  // The configuration a trial gets (without the paths).
  [[nodiscard]] std::string conf_for(bool eviction) const;

 private:
  std::vector<std::string> environment(const std::string& conf) const;

  TrialSettings settings_;
  std::deque<Trial> trials_;  // a deque: references from run() stay valid
};

// The steps of a trace and their median time; for tests. False with `error`
// when the trace cannot be read.
struct StepTiming {
  std::size_t steps = 0;
  double median_s = 0;
};
bool time_steps_from_trace(const std::string& path, StepTiming* timing, std::string* error);
StepTiming time_steps_from_markers(const std::vector<double>& marker_s);

}  // namespace tidepool::advise
