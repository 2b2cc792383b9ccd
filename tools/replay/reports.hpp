// What tidepool-replay writes: a table for people, JSON lines for programs,
// a self-contained HTML report (html_report.cpp) and a Chrome trace-event
// file for Perfetto (chrome_trace.cpp).
#pragma once

#include <string>
#include <vector>

#include "comparison.hpp"
#include "replay.hpp"
#include "report_run.hpp"
#include "run_report.hpp"

namespace tidepool::replay {

std::string table(const std::vector<Result>& results);
// One JSON object per result, with exactly the documented keys.
std::string json_line(const Result& result);
// One offline file: the data, the script (report.js) and the style
// (report.css) inline; nothing is fetched. With `comparison`, a section
// sets each run against an earlier replay's; with `run_report`, a section
// shows the run that recorded the trace, beside its replay.
std::string html_report(const std::vector<Result>& results, const ReportRun& run = {},
                        const Comparison* comparison = nullptr, const RunReport* run_report = nullptr);
// Live and reserved counters, allocation slices per stream (when the results
// recorded lifetimes), out-of-memory and budget markers; one process per result.
std::string chrome_trace(const std::vector<Result>& results, const ChromeTraceOptions& options = {});

}  // namespace tidepool::replay
