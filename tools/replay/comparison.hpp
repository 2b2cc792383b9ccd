// Comparison: this replay set against an earlier one, from the JSON lines
// that run wrote (`--json` or `--json-out`), given with `--compare FILE`.
// Runs are matched by trace file name (not path: the two runs may have read
// the traces from different folders), policy and free mode; what only one
// side has, or a key a side holds twice, is listed, not guessed at. Owns the reading of the earlier file
// and the matching; the table and the HTML section are drawn from it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "replay.hpp"

namespace tidepool::replay {

struct ComparedRun {
  std::string trace;  // the file name
  std::string policy;
  std::string frees;
  double before_utilization = 0;
  double after_utilization = 0;
  std::uint64_t before_peak_reserved = 0;
  std::uint64_t after_peak_reserved = 0;
  std::uint64_t before_failed = 0;
  std::uint64_t after_failed = 0;
};

struct Comparison {
  std::string baseline;                // the earlier file, as given
  std::vector<ComparedRun> runs;       // in this replay's order
  std::vector<std::string> unmatched;  // "trace policy (frees): only in this replay" or "...: only in FILE"
};

// The earlier run's lines, checked: false with `error` ("FILE:LINE: what")
// when the file cannot be read or a line is not one of tidepool-replay's.
struct BaselineRun {
  std::string trace;
  std::string policy;
  std::string frees;
  double utilization = 0;
  std::uint64_t peak_reserved_bytes = 0;
  std::uint64_t failed_allocations = 0;
};
bool load_baseline(const std::string& path, std::vector<BaselineRun>* runs, std::string* error);

Comparison compare_runs(const std::vector<Result>& results, const std::vector<BaselineRun>& baseline,
                        const std::string& baseline_name);

// For the terminal: one line per matched run, then what did not match.
std::string comparison_table(const Comparison& comparison);

}  // namespace tidepool::replay
