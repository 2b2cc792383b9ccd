// See trial.hpp.
#include "trial.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "child.hpp"
#include "replay.hpp"
#include "steps.hpp"

extern char** environ;  // NOLINT(readability-redundant-declaration): POSIX declares it nowhere

namespace tidepool::advise {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t mid = v.size() / 2;
  return v.size() % 2 == 1 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

bool mentions_out_of_memory(const std::string& text) {
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  return lower.find("out of memory") != std::string::npos || lower.find("outofmemory") != std::string::npos ||
         lower.find("cuda_error_out_of_memory") != std::string::npos;
}

// The report's figures, the largest device's for peaks, sums for counts.
// False when there is no readable report.
bool read_report(const std::string& path, Trial* t) {
  std::ifstream in(path);
  if (!in) return false;
  const auto report = nlohmann::json::parse(in, nullptr, false);
  if (report.is_discarded() || !report.is_object() || !report.contains("devices")) return false;
  t->report_found = true;
  for (const auto& d : report["devices"]) {
    const auto u64 = [&d](const char* key) { return d.value(key, std::uint64_t{0}); };
    t->allocations += u64("allocations");
    t->peak_live_bytes = std::max(t->peak_live_bytes, u64("peak_live_bytes"));
    t->peak_reserved_bytes = std::max(t->peak_reserved_bytes, u64("peak_reserved_bytes"));
    t->device_total_bytes = std::max(t->device_total_bytes, u64("device_total_bytes"));
    t->device_limit_bytes = std::max(t->device_limit_bytes, u64("device_limit_bytes"));
    t->ooms += u64("ooms");
    t->evicted_bytes += u64("evicted_bytes");
    t->prefetched_bytes += u64("prefetched_bytes");
    if (t->eviction && d.value("page_bytes", 0) != 0) {
      t->eviction_state = d.value("eviction", false) ? "on" : "off";
    }
  }
  return true;
}

std::string describe_exit(const ChildResult& r) {
  if (r.signal != 0) return "killed by signal " + std::to_string(r.signal);
  return "exited with status " + std::to_string(r.exit_code);
}

}  // namespace

const char* outcome_name(Outcome outcome) noexcept {
  switch (outcome) {
    case Outcome::fits: return "fits";
    case Outcome::out_of_memory: return "out of memory";
    case Outcome::timed_out: return "timed out";
    case Outcome::failed: return "failed";
  }
  return "?";
}

bool time_steps_from_trace(const std::string& path, StepTiming* timing, std::string* error) {
  std::vector<runtime::TraceEvent> events;
  std::string warning;  // a trace cut short is timed up to the cut
  if (!replay::load_trace(path, &events, error, &warning)) return false;
  *timing = {};
  const auto steps = replay::detect_steps(events);
  if (steps.size() < 2) return true;  // no repetition: nothing to time
  timing->steps = steps.size() - 1;
  std::vector<double> seconds;
  for (std::size_t i = 1; i + 1 < steps.size(); ++i) {
    const auto begin = events[steps[i].begin].time_us;
    const auto end = events[steps[i + 1].begin].time_us;
    if (end >= begin) seconds.push_back(static_cast<double>(end - begin) / 1e6);
  }
  timing->median_s = median(seconds);
  return true;
}

StepTiming time_steps_from_markers(const std::vector<double>& marker_s) {
  StepTiming timing;
  timing.steps = marker_s.size();
  std::vector<double> seconds;
  for (std::size_t i = 1; i < marker_s.size(); ++i) seconds.push_back(marker_s[i] - marker_s[i - 1]);
  timing.median_s = median(seconds);
  return timing;
}

std::string TrialRunner::conf_for(bool eviction) const {
  std::string conf;
  if (!settings_.extra_conf.empty()) conf = settings_.extra_conf + ",";
  conf += "device_limit:" + settings_.device_limit;
  conf += eviction ? ",evict:on,prefetch:learn" : ",evict:off";
  return conf;
}

std::vector<std::string> TrialRunner::environment(const std::string& conf) const {
  std::vector<std::string> env;
  std::string preload;
  std::string library_path;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    const std::string value = entry.substr(std::min(entry.size(), name.size() + 1));
    if (name == "TIDEPOOL_CONF" || (name == "PYTHONUNBUFFERED" && settings_.step_marker)) continue;
    if (name == "LD_PRELOAD") {
      preload = value;
      continue;
    }
    if (!settings_.sim_library.empty() && (name == "LD_LIBRARY_PATH" || name == "TIDEPOOL_CUDA_LIB")) {
      if (name == "LD_LIBRARY_PATH") library_path = value;
      continue;
    }
    env.push_back(entry);
  }
  // Entries already preloaded stay first (sanitizer runtimes insist on it),
  // as tidepool-run does.
  env.push_back("LD_PRELOAD=" + (preload.empty() ? "" : preload + ":") + settings_.library);
  env.push_back("TIDEPOOL_CONF=" + conf);
  if (!settings_.sim_library.empty()) {
    const auto slash = settings_.sim_library.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : settings_.sim_library.substr(0, slash);
    env.push_back("TIDEPOOL_CUDA_LIB=" + settings_.sim_library);
    env.push_back("LD_LIBRARY_PATH=" + dir + (library_path.empty() ? "" : ":" + library_path));
  }
  // A marker is timed when its line arrives: Python must not hold it in a buffer.
  if (settings_.step_marker) env.emplace_back("PYTHONUNBUFFERED=1");
  // PyTorch's caching allocator on top of the pool would hide every step's
  // allocations after the first (nothing to time) and hold its cache in the
  // peaks; off, as docs/pytorch.md runs the preload. A value the user set stays.
  if (std::getenv("PYTORCH_NO_CUDA_MEMORY_CACHING") == nullptr) env.emplace_back("PYTORCH_NO_CUDA_MEMORY_CACHING=1");
  return env;
}

const Trial* TrialRunner::find(long batch, bool eviction) const {
  for (const auto& t : trials_) {
    if (t.batch == batch && t.eviction == eviction) return &t;
  }
  return nullptr;
}

const Trial& TrialRunner::run(long batch, bool eviction) {
  Trial& t = trials_.emplace_back();
  t.index = static_cast<int>(trials_.size());
  t.batch = batch;
  t.eviction = eviction;
  const std::string stem = settings_.work_dir + "/trial-" + std::to_string(t.index);
  const std::string report = stem + ".json";
  const std::string trace = stem + ".csv";
  std::remove(report.c_str());
  std::remove(trace.c_str());

  ChildSpec spec;
  spec.argv = settings_.command.expand(batch, settings_.steps);
  spec.environment = environment(conf_for(eviction) + ",report:" + report + ",trace:" + trace);
  spec.timeout_s = settings_.timeout_s;
  spec.step_marker = settings_.step_marker;
  const ChildResult r = run_child(spec);
  t.exit_code = r.exit_code;
  t.signal = r.signal;
  t.wall_s = r.wall_s;
  {
    std::ofstream(stem + ".stdout.txt") << r.stdout_tail;
    std::ofstream(stem + ".stderr.txt") << r.stderr_tail;
  }
  read_report(report, &t);

  StepTiming timing;
  if (settings_.step_marker) {
    timing = time_steps_from_markers(r.marker_s);
    t.step_source = "marker";
  } else {
    std::string error;
    if (time_steps_from_trace(trace, &timing, &error)) t.step_source = "trace";
  }
  t.steps = timing.steps;
  t.step_s = timing.median_s;
  if (t.step_s > 0) t.samples_per_s = static_cast<double>(batch) / t.step_s;
  if (t.steps > 0) {
    t.evicted_per_step = static_cast<double>(t.evicted_bytes) / static_cast<double>(t.steps);
    t.prefetched_per_step = static_cast<double>(t.prefetched_bytes) / static_cast<double>(t.steps);
  }

  if (!r.started) {
    t.outcome = Outcome::failed;
    t.reason = r.start_error;
  } else if (r.interrupted) {
    t.outcome = Outcome::failed;
    t.reason = "interrupted";
  } else if (r.timed_out) {
    t.outcome = Outcome::timed_out;
    char text[96];
    std::snprintf(text, sizeof text, "still running after %g s: killed", settings_.timeout_s);
    t.reason = text;
  } else if (r.status_lost) {
    t.outcome = Outcome::failed;
    t.reason = "its exit status was lost (something reaped it first)";
  } else if (r.exit_code == 0 && r.signal == 0) {
    if (!t.report_found) {
      t.outcome = Outcome::failed;
      t.reason =
          "it exited without tidepool seeing a CUDA call (no report): is it a CUDA program, and does it "
          "run through the preload (not a static binary, not setuid)?";
    } else if (t.allocations == 0) {
      t.outcome = Outcome::failed;
      t.reason = "it made no device allocation: nothing to size";
    } else {
      t.outcome = Outcome::fits;
    }
  } else if (t.ooms > 0 || mentions_out_of_memory(r.stderr_tail) || mentions_out_of_memory(r.stdout_tail)) {
    t.outcome = Outcome::out_of_memory;
    t.reason = describe_exit(r) + (t.ooms > 0 ? ", " + std::to_string(t.ooms) + " allocation(s) refused"
                                              : ", out of memory on its stderr");
  } else {
    t.outcome = Outcome::failed;
    t.reason = describe_exit(r) + " without running out of memory";
  }
  if (t.outcome == Outcome::failed) t.stderr_tail = last_lines(r.stderr_tail, 20);
  return t;
}

}  // namespace tidepool::advise
