// Formatting replay results for the terminal and for programs: the table and
// the JSON lines (the HTML report and the Chrome trace have files of their
// own). The last step stands for the steady state: its driver calls are the
// ones a training loop pays every step from then on.
#include "reports.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

namespace tidepool::replay {

namespace {

std::string mib(std::uint64_t bytes) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buffer;
}

std::string base_name(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The last step, or an empty one for a result that has none.
StepResult last_step(const Result& r) { return r.steps.empty() ? StepResult{} : r.steps.back(); }

nlohmann::json calls_json(const DriverCalls& calls) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [key, count] : named_counts(calls)) j[key] = count;
  return j;
}

nlohmann::json step_json(const StepResult& s) {
  return {{"begin", s.begin},
          {"end", s.end},
          {"events", s.events},
          {"vmm", s.calls.vmm()},
          {"syncs", s.calls.syncs()},
          {"event_calls", s.calls.events()},
          {"peak_live_bytes", s.peak_live_bytes},
          {"peak_reserved_bytes", s.peak_reserved_bytes},
          {"driver_calls", calls_json(s.calls)}};
}

}  // namespace

std::string table(const std::vector<Result>& results) {
  // The name columns are as wide as their longest entry: a cut name can
  // make two traces look like one.
  int trace_width = 5;
  int policy_width = 6;
  bool any_unknown_frees = false;
  for (const Result& r : results) {
    trace_width = std::max(trace_width, static_cast<int>(base_name(r.trace).size()));
    policy_width = std::max(policy_width, static_cast<int>(r.policy.size()));
    any_unknown_frees = any_unknown_frees || r.unknown_frees != 0;
  }
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-*s %-*s %9s %12s %12s %8s %8s %8s %7s %8s | %6s %6s %7s\n", trace_width, "trace",
                policy_width, "policy", "events", "peak live", "peak resv", "util", "ext frag", "waste", "failed",
                "ns/event", "vmm", "syncs", "evcalls");
  out += line;
  for (const Result& r : results) {
    const StepResult last = last_step(r);
    std::snprintf(line, sizeof line, " %9llu %8s MiB %8s MiB %8.4f %8.4f %8s %7llu %8.0f | %6llu %6llu %7llu\n",
                  static_cast<unsigned long long>(r.events), mib(r.peak_live_bytes).c_str(),
                  mib(r.peak_reserved_bytes).c_str(), r.utilization, r.external_fragmentation_at_peak,
                  mib(r.internal_waste_at_peak).c_str(), static_cast<unsigned long long>(r.failed_allocations),
                  r.ns_per_event, static_cast<unsigned long long>(last.calls.vmm()),
                  static_cast<unsigned long long>(last.calls.syncs()),
                  static_cast<unsigned long long>(last.calls.events()));
    std::string name = base_name(r.trace);
    name.resize(static_cast<std::size_t>(trace_width), ' ');
    std::string policy = r.policy;
    policy.resize(static_cast<std::size_t>(policy_width), ' ');
    out += name + " " + policy + line;
  }
  out +=
      "(after |: driver calls in the last step. vmm: cuMemCreate/Map/SetAccess/Unmap/Release; syncs: "
      "cuCtxSynchronize, cuStreamSynchronize; evcalls: cuEventRecord/Query/Synchronize, cuStreamWaitEvent)\n";
  if (any_unknown_frees) {
    for (const Result& r : results) {
      if (r.unknown_frees == 0) continue;
      out += "(--lenient: " + std::to_string(r.unknown_frees) + " frees of blocks allocated before " +
             base_name(r.trace) + " began were skipped under " + r.policy + ")\n";
    }
  }
  return out;
}

std::string json_line(const Result& r) {
  nlohmann::json j = {
      {"trace", r.trace},
      {"policy", r.policy},
      {"events", r.events},
      {"peak_live_bytes", r.peak_live_bytes},
      {"peak_reserved_bytes", r.peak_reserved_bytes},
      {"utilization", r.utilization},
      {"external_fragmentation_at_peak", r.external_fragmentation_at_peak},
      {"internal_waste_at_peak", r.internal_waste_at_peak},
      {"failed_allocations", r.failed_allocations},
      {"unknown_frees", r.unknown_frees},
      {"maps", r.maps},
      {"unmaps", r.unmaps},
      {"evicted_bytes", r.evicted_bytes},
      {"ns_per_event", r.ns_per_event},
      {"frees", free_mode_name(r.frees)},
      {"driver_calls", calls_json(r.driver_calls)},
      {"last_step", step_json(last_step(r))},
  };
  nlohmann::json steps = nlohmann::json::array();
  for (const StepResult& s : r.steps) steps.push_back(step_json(s));
  j["steps"] = std::move(steps);
  return j.dump();
}

}  // namespace tidepool::replay
