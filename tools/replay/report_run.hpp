// ReportRun: what the HTML report says about the run that made it (version,
// command line, date, host, the options that shape the figures, the traces)
// and the options of the Chrome trace (the JSON report's run object is
// runtime::RunInfo). Kept apart from the results so a
// report of the same results is byte-identical when the run is the same.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "replay.hpp"

namespace tidepool::replay {

struct TraceInfo {
  std::string path;
  std::uint64_t events = 0;
};

struct ReportRun {
  std::string version;            // empty: this build's
  std::vector<std::string> argv;  // the command line, one element per argument
  std::string date;               // e.g. "2024-06-01T12:34:56Z"; empty: none shown
  std::string host;
  // Shown as given, in order: what changes the figures (frees, budget, conf, steps...).
  std::vector<std::pair<std::string, std::string>> options;
  std::vector<TraceInfo> traces;  // empty: taken from the results
};

// The version, command line, date (now, UTC) and host of this process, and
// the options of `target` and `replay` that change the figures.
ReportRun make_report_run(int argc, const char* const* argv, const TargetOptions& target, const ReplayOptions& replay);

struct ChromeTraceOptions {
  // Allocation slices over all results, shared evenly; the slices kept for a
  // result are those nearest its live peak, and its process says how many
  // were left out. A slice is two events of about 100 bytes each.
  std::size_t max_slices = 200'000;
};

}  // namespace tidepool::replay
