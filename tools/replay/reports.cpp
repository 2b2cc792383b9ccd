// Formatting replay results for the terminal and for programs: the table and
// the JSON lines (the HTML report and the Chrome trace have files of their
// own). The last step stands for the steady state: its driver calls are the
// ones a training loop pays every step from then on.
#include "reports.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "formatting.hpp"
#include "trace_notes.hpp"
#include "util/util.hpp"

namespace tidepool::replay {

namespace {

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

namespace {

// The device limit the rows ran under, once for the table when they share it.
std::string limits_note(const std::vector<Result>& results) {
  if (results.empty()) return {};
  const Result& first = results.front();
  const bool shared = std::all_of(results.begin(), results.end(), [&](const Result& r) {
    return r.device_limit_bytes == first.device_limit_bytes && r.device_limit_given == first.device_limit_given;
  });
  if (!shared) return "(the rows ran under different device limits: see device_limit_bytes in --json)\n";
  return "(every target, baselines included, ran under one device limit: " +
         util::format_size(first.device_limit_bytes) + ", " +
         (first.device_limit_given ? "as given" : "the replay device's memory; --device-limit sets another") + ")\n";
}

// Each trace once, in the order of its first result.
std::vector<std::string> traces_in_order(const std::vector<Result>& results) {
  std::vector<std::string> traces;
  for (const Result& r : results) {
    if (std::find(traces.begin(), traces.end(), r.trace) == traces.end()) traces.push_back(r.trace);
  }
  return traces;
}

// A trace whose targets failed different numbers of requests: their peaks
// count different allocations, so the rows do not compare.
std::string comparability_note(const std::vector<Result>& results) {
  std::string out;
  for (const std::string& trace : traces_in_order(results)) {
    std::string failures;
    std::optional<std::uint64_t> seen;
    bool differ = false;
    for (const Result& r : results) {
      if (r.trace != trace) continue;
      differ = differ || (seen && *seen != r.failed_allocations);
      seen = r.failed_allocations;
      failures += (failures.empty() ? "" : ", ") + r.policy + " " + std::to_string(r.failed_allocations);
    }
    if (differ) {
      out += "(" + base_name(trace) + ": the targets failed different numbers of requests (" + failures +
             "): their peaks count different allocations and do not compare)\n";
    }
  }
  return out;
}

// Per trace: a baseline ahead of tidepool's best policy, and how a sample
// trace was recorded.
std::string trace_notes(const std::vector<Result>& results) {
  std::string out;
  for (const std::string& trace : traces_in_order(results)) {
    std::vector<const Result*> runs;
    for (const Result& r : results) {
      if (r.trace == trace) runs.push_back(&r);
    }
    const Result& best = *runs[best_run(runs)];
    const std::vector<const Result*> ahead = baselines_ahead(runs, best);
    if (!ahead.empty()) {
      std::string names;
      for (const Result* r : ahead) {
        char figure[32];
        std::snprintf(figure, sizeof figure, " %.4f", r->utilization);
        names += (names.empty() ? "" : ", ") + r->policy + figure;
      }
      char best_figure[32];
      std::snprintf(best_figure, sizeof best_figure, "%.4f", best.utilization);
      out += "(" + base_name(trace) + ": ahead of tidepool's best, " + best.policy + " " + best_figure +
             (ahead.size() == 1 ? ", is a baseline: " : ", are baselines: ") + names + ")\n";
    }
    if (const std::string origin = sample_origin(*runs.front()); !origin.empty()) {
      out += "(" + base_name(trace) + ": " + origin + ")\n";
    }
    if (runs.front()->allocations) {
      if (const std::string owners = owners_line(*runs.front()->allocations); !owners.empty()) {
        out += "(" + base_name(trace) + ", by owner " + owners + ")\n";
      }
    }
  }
  return out;
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
      "cuCtxSynchronize, cuStreamSynchronize; evcalls: cuEventRecord/Query/Synchronize, cuStreamWaitEvent)\n"
      "(ns/event: what replaying one event cost this tool: for tidepool's policies the simulated driver's calls "
      "included, for the baselines only their arithmetic; a replay cost, not an allocator's speed: bench_hot_path and "
      "bench_live_replay time the allocator)\n";
  out += limits_note(results);
  out += comparability_note(results);
  out += trace_notes(results);
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
      {"device_limit_bytes", r.device_limit_bytes},
      {"device_limit_given", r.device_limit_given},
      {"frees", free_mode_name(r.frees)},
      {"lag_us", r.lag_us},
      {"host_us", r.host_us >= 0 ? nlohmann::json(r.host_us) : nlohmann::json(nullptr)},
      {"driver_calls", calls_json(r.driver_calls)},
      {"last_step", step_json(last_step(r))},
  };
  nlohmann::json steps = nlohmann::json::array();
  for (const StepResult& s : r.steps) steps.push_back(step_json(s));
  j["steps"] = std::move(steps);
  return j.dump();
}

}  // namespace tidepool::replay
