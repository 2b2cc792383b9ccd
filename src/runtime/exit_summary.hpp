// The exit summary: with `log:info` (or more verbose), one paragraph per
// device when the run ends, in the log (stderr or log_file, never stdout),
// for a user who will not open the JSON report: allocations, peak live
// against peak reserved, fragmentation, out-of-memory failures, driver work,
// evictions, who held the memory at the peak, and where the report and the
// trace went. Made from the same
// Report the JSON is, so the two always agree.
#pragma once

#include <string>
#include <vector>

#include "runtime/report.hpp"

namespace tidepool::runtime {

// The paragraph of one device (one line, sentences separated by ". ");
// `callers` names its owners (Report::callers).
std::string device_summary(const DeviceReport& device, const std::vector<CallerName>& callers = {});

struct SummaryOutputs {
  std::string report_path;  // empty: no report configured
  bool report_written = false;
  std::string trace_path;  // empty: no trace recorded
};
// The closing line: where the report and the trace are.
std::string outputs_summary(const SummaryOutputs& outputs);

// Logs the summary at info; nothing when the log is less verbose.
void log_exit_summary(const Report& report, const SummaryOutputs& outputs);

}  // namespace tidepool::runtime
