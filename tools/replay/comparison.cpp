// See comparison.hpp.
#include "comparison.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

namespace tidepool::replay {

namespace {

std::string file_name(const std::string& path) { return std::filesystem::path(path).filename().string(); }

std::string key_text(const std::string& trace, const std::string& policy, const std::string& frees) {
  return trace + " " + policy + " (frees " + frees + ")";
}

}  // namespace

bool load_baseline(const std::string& path, std::vector<BaselineRun>* runs, std::string* error) {
  std::ifstream in(path);
  if (!in) {
    *error = path + ": cannot be read";
    return false;
  }
  std::string line;
  std::size_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    const auto where = path + ":" + std::to_string(number) + ": ";
    if (j.is_discarded() || !j.is_object()) {
      *error = where + "not a JSON line (--compare takes what tidepool-replay --json or --json-out wrote)";
      return false;
    }
    const bool shaped = j.contains("trace") && j["trace"].is_string() && j.contains("policy") &&
                        j["policy"].is_string() && j.contains("utilization") && j["utilization"].is_number() &&
                        j.contains("peak_reserved_bytes") && j["peak_reserved_bytes"].is_number_unsigned();
    if (!shaped) {
      *error = where + "a JSON object without tidepool-replay's keys (trace, policy, utilization, peak_reserved_bytes)";
      return false;
    }
    BaselineRun run;
    run.trace = file_name(j["trace"].get<std::string>());
    run.policy = j["policy"].get<std::string>();
    run.frees = j.contains("frees") && j["frees"].is_string() ? j["frees"].get<std::string>() : "stream";
    run.utilization = j["utilization"].get<double>();
    run.peak_reserved_bytes = j["peak_reserved_bytes"].get<std::uint64_t>();
    if (j.contains("failed_allocations") && j["failed_allocations"].is_number_unsigned()) {
      run.failed_allocations = j["failed_allocations"].get<std::uint64_t>();
    }
    runs->push_back(std::move(run));
  }
  if (runs->empty()) {
    *error = path + ": no runs in it";
    return false;
  }
  return true;
}

Comparison compare_runs(const std::vector<Result>& results, const std::vector<BaselineRun>& baseline,
                        const std::string& baseline_name) {
  Comparison c;
  c.baseline = baseline_name;
  // A key more than once on a side (two traces of one name from different
  // folders) cannot be paired without a guess: such runs are named instead.
  std::map<std::string, int> now_count;
  std::map<std::string, int> before_count;
  for (const Result& r : results) ++now_count[key_text(file_name(r.trace), r.policy, free_mode_name(r.frees))];
  for (const BaselineRun& b : baseline) ++before_count[key_text(b.trace, b.policy, b.frees)];
  const auto ambiguous = [&](const std::string& key) { return now_count[key] > 1 || before_count[key] > 1; };
  std::vector<bool> used(baseline.size(), false);
  for (const Result& r : results) {
    const std::string trace = file_name(r.trace);
    const std::string frees = free_mode_name(r.frees);
    const std::string key = key_text(trace, r.policy, frees);
    if (ambiguous(key)) continue;
    bool found = false;
    for (std::size_t i = 0; i < baseline.size() && !found; ++i) {
      const BaselineRun& b = baseline[i];
      if (b.trace != trace || b.policy != r.policy || b.frees != frees) continue;
      used[i] = true;
      found = true;
      c.runs.push_back(ComparedRun{trace, r.policy, frees, b.utilization, r.utilization, b.peak_reserved_bytes,
                                   r.peak_reserved_bytes, b.failed_allocations, r.failed_allocations});
    }
    if (!found) c.unmatched.push_back(key + ": only in this replay");
  }
  for (std::size_t i = 0; i < baseline.size(); ++i) {
    const std::string key = key_text(baseline[i].trace, baseline[i].policy, baseline[i].frees);
    if (used[i] || ambiguous(key)) continue;
    std::string line = key + ": only in ";
    line += baseline_name;
    c.unmatched.push_back(std::move(line));
  }
  for (const auto& [key, count] : now_count) {
    if (ambiguous(key)) c.unmatched.push_back(key + ": more than once on a side (traces of one name), not compared");
  }
  for (const auto& [key, count] : before_count) {
    if (ambiguous(key) && now_count.count(key) == 0) {
      std::string line = key + ": more than once in ";
      line += baseline_name;
      line += ", not compared";
      c.unmatched.push_back(std::move(line));
    }
  }
  return c;
}

std::string comparison_table(const Comparison& c) {
  std::string out = "\ncompared with " + c.baseline + " (before -> now):\n";
  char line[512];
  std::snprintf(line, sizeof line, "%-28s %-14s %-7s %19s %9s %25s %8s %11s\n", "trace", "policy", "frees",
                "utilization", "change", "peak reserved MiB", "change", "failed");
  out += line;
  for (const ComparedRun& r : c.runs) {
    const double before_mib = static_cast<double>(r.before_peak_reserved) / (1024.0 * 1024.0);
    const double after_mib = static_cast<double>(r.after_peak_reserved) / (1024.0 * 1024.0);
    const double percent = r.before_peak_reserved == 0 ? 0.0 : 100.0 * (after_mib - before_mib) / before_mib;
    std::snprintf(line, sizeof line,
                  "%-28s %-14s %-7s %8.4f -> %8.4f %+9.4f %10.1f -> %10.1f %+7.2f%% %4llu -> %4llu\n", r.trace.c_str(),
                  r.policy.c_str(), r.frees.c_str(), r.before_utilization, r.after_utilization,
                  r.after_utilization - r.before_utilization, before_mib, after_mib, percent,
                  static_cast<unsigned long long>(r.before_failed), static_cast<unsigned long long>(r.after_failed));
    out += line;
  }
  for (const std::string& u : c.unmatched) out += "  not compared: " + u + "\n";
  return out;
}

}  // namespace tidepool::replay
