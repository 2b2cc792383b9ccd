// What tidepool-replay writes: a table for people, JSON lines for programs,
// a self-contained HTML report, and Chrome trace-event counters.
#pragma once

#include <string>
#include <vector>

#include "replay.hpp"

namespace tidepool::replay {

std::string table(const std::vector<Result>& results);
// One JSON object per result, with exactly the documented keys.
std::string json_line(const Result& result);
// No network access and no external scripts: inline SVG and CSS only.
std::string html_report(const std::vector<Result>& results);
std::string chrome_trace(const std::vector<Result>& results);

}  // namespace tidepool::replay
