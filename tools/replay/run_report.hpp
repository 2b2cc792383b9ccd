// RunReport: what a run under the preload wrote with `report:PATH` (the JSON
// report, docs/report.md), read back so that `tidepool-replay --run-report
// FILE` shows the run itself beside the replays of its trace: the live
// figures per device, memory by owner with the call sites, and the run's
// own policy set against the replay of it. Owns the reading (every figure
// checked for its type; a report that is not one fails with the reason) and
// the lines under the table.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "replay.hpp"

namespace tidepool::replay {

struct RunCallSite {
  std::string function;  // empty where the report has none
  std::string offset;
  std::uint64_t allocations = 0;
  std::uint64_t live_at_peak_bytes = 0;
  std::uint64_t peak_live_bytes = 0;
};

struct RunOwner {
  std::string library;  // empty: not known
  std::string owner;    // what it is (framework, cuBLAS, ...)
  std::uint64_t allocations = 0;
  std::uint64_t failures = 0;
  std::uint64_t requested_bytes = 0;
  std::uint64_t live_bytes = 0;
  std::uint64_t live_at_peak_bytes = 0;
  std::vector<RunCallSite> call_sites;
};

struct RunDevice {
  int device = 0;
  std::uint64_t peak_live_bytes = 0;
  std::uint64_t peak_reserved_bytes = 0;
  double utilization = 0;
  std::uint64_t ooms = 0;
  std::uint64_t allocations = 0;
  std::uint64_t passthrough_allocations = 0;
  std::uint64_t device_limit_bytes = 0;
  bool eviction = false;
  std::uint64_t evicted_bytes = 0;
  std::vector<RunOwner> owners;  // empty in a report from before owners were recorded
};

struct RunReport {
  std::string path;
  std::string policy;
  std::string command;  // the run's argv, joined
  double duration_seconds = 0;
  std::vector<RunDevice> devices;
};

// False with `error` ("FILE: what") when the file cannot be read or is not
// a tidepool report.
bool load_run_report(const std::string& path, RunReport* report, std::string* error);

// The replay of the run's own policy, on the first trace that ran it; null
// when none did.
const Result* replay_of_run(const RunReport& report, const std::vector<Result>& results);
// For the terminal: a line per device, with that replay beside it. (The
// HTML report draws its own section from the same figures.)
std::string run_report_lines(const RunReport& report, const std::vector<Result>& results);

}  // namespace tidepool::replay
