// Replaying events: trace pointers map to the target's addresses; metrics
// are sampled as the run goes; the layout at the live peak is captured by a
// second, deterministic pass that stops at the peak event. Driver calls are
// read at step boundaries only, so the count never costs a call per event.
// Failed allocations are always recorded, allocation lifetimes only when
// asked (for the Chrome trace), both up to a cap.
#include "replay.hpp"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <unordered_map>

#include "formatting.hpp"
#include "steps.hpp"

namespace tidepool::replay {

namespace {

// A PyTorch memory snapshot (a pickle: protocol 2 and later start with 0x80)
// is a common thing to hand this tool; say which command converts it.
bool looks_like_pickle(const std::string& path) {
  const auto ends_with = [&](const char* suffix) {
    const std::size_t n = std::strlen(suffix);
    return path.size() >= n && path.compare(path.size() - n, n, suffix) == 0;
  };
  if (ends_with(".pickle") || ends_with(".pkl")) return true;
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) return false;
  const int first = std::fgetc(file);
  std::fclose(file);
  return first == 0x80;
}

}  // namespace

bool load_trace(const std::string& path, std::vector<TraceEvent>* events, std::string* error, std::string* warning,
                std::vector<std::string>* owners) {
  if (looks_like_pickle(path)) {
    *error = path + ": a PyTorch memory snapshot (pickle), not an RMM CSV trace; convert it first with\n  " +
             "tidepool-snapshot2csv " + path + " -o trace.csv";
    return false;
  }
  auto reader = TraceReader::open(path);
  if (!reader) {
    *error = path + ": " + reader.status().message() + ": " + std::strerror(errno);
    return false;
  }
  TraceEvent e;
  while (reader.value()->next(&e)) events->push_back(e);
  if (reader.value()->failed()) {
    *error = reader.value()->error();
    return false;
  }
  if (owners != nullptr) *owners = reader.value()->owners();
  const std::string& note = reader.value()->warning();
  if (warning != nullptr) {
    *warning = note;
  } else if (!note.empty()) {
    std::fprintf(stderr, "%s\n", note.c_str());
  }
  return true;
}

namespace {

struct Pass {
  std::uint64_t peak_event = 0;  // index of the event after which live peaked
  bool ok = true;
};

// One line on stderr, redrawn in place: which run of how many, the trace
// and policy in full (a cut name is useless when paths are long), events
// done of the total, the rate and the time left at that rate.
void show_progress(const ReplayOptions& options, const std::string& trace_name, const std::string& policy,
                   std::size_t done, std::size_t total, std::chrono::steady_clock::time_point started) {
  const int width = 24;
  const int filled = total == 0 ? width : static_cast<int>(width * done / total);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0.0;
  const double left = rate > 0 ? static_cast<double>(total - done) / rate : 0.0;
  const std::string name = base_name(trace_name);
  char run[48] = "";
  if (options.run_count > 1) std::snprintf(run, sizeof run, "[%zu/%zu] ", options.run_index + 1, options.run_count);
  std::fprintf(stderr, "\r\033[K%s%s %s [%-*.*s] %zu/%zu events %.2fM ev/s ETA %.1fs", run, name.c_str(),
               policy.c_str(), width, filled, "========================", done, total, rate / 1e6,
               done == total ? seconds : left);
  if (done == total) std::fprintf(stderr, "\n");
}

// A trace pointer's allocation. `placed` is false when the target refused it:
// the program was served, the target was not, and the free has nothing to give back.
inline constexpr std::size_t kNotRecorded = static_cast<std::size_t>(-1);

struct Live {
  std::uint64_t address = 0;
  std::uint64_t size = 0;
  std::uint64_t line = 0;
  bool placed = false;
  std::size_t lifetime = kNotRecorded;  // its entry in Result::lifetimes
};

// Lifetimes and failures are kept for the Chrome trace and the report, up to
// the caps: past them a huge trace costs a counter, not memory per event.
void record_lifetime(const TraceEvent& e, std::uint64_t address, const ReplayOptions& options, Result* result,
                     Live* live) {
  if (result->lifetimes.size() >= options.max_lifetimes) {
    result->lifetimes_dropped++;
    return;
  }
  live->lifetime = result->lifetimes.size();
  result->lifetimes.push_back(Lifetime{e.time_us, 0, address, e.size, e.stream, e.line, false});
}

void record_failure(const TraceEvent& e, const Target& target, const ReplayOptions& options, Result* result) {
  if (result->failures.size() >= options.max_failures) {
    result->failures_dropped++;
    return;
  }
  const Counters c = target.counters();
  result->failures.push_back(FailedAllocation{e.time_us, e.size, e.stream, e.line, c.live_bytes, c.reserved_bytes});
}

// The target's layout with same-kind neighbours merged (LayoutMoment).
std::vector<Span> merged_layout(const Target& target) {
  std::vector<Span> merged;
  for (const Span& s : target.layout()) {
    if (!merged.empty() && merged.back().used == s.used && merged.back().offset + merged.back().size == s.offset) {
      merged.back().size += s.size;
    } else {
      merged.push_back(s);
    }
  }
  return merged;
}

// One pass over the events, stopping after `stop_after` events (all when 0).
// A pass that is not measuring (stop_after set) captures the layout at
// `stop_after` (the live peak) and, when `moments` is set, goes on to the end
// capturing a LayoutMoment after each of those event counts.
bool replay_pass(const std::string& trace_name, const std::vector<TraceEvent>& events, const std::vector<Step>& steps,
                 Target& target, std::size_t stop_after, const ReplayOptions& options, Result* result, Pass* pass,
                 std::string* error, const std::vector<std::size_t>& moments = {}) {
  std::unordered_map<std::uint64_t, Live> live;  // trace pointer -> its allocation
  live.reserve(events.size());
  const std::size_t limit = stop_after == 0 || !moments.empty() ? events.size() : stop_after;
  std::size_t next_moment = 0;
  const std::size_t stride =
      std::max<std::size_t>(1, events.size() / std::max<std::size_t>(1, options.timeline_points));
  const bool measuring = stop_after == 0;
  const auto started = std::chrono::steady_clock::now();
  std::chrono::steady_clock::duration in_target{};  // time spent inside the target's calls only
  // The step being measured; its calls are counted from the previous boundary
  // (the first from the target's creation, so the steps sum to the total).
  std::size_t next_step = 0;
  DriverCalls at_step_start;
  StepResult step;
  const auto close_step = [&] {
    const DriverCalls now = target.driver_calls();
    step.begin = steps[next_step].begin;
    step.end = steps[next_step].end;
    step.begin_us = step.begin < events.size() ? events[step.begin].time_us : 0;
    step.events = step.end - step.begin;
    step.calls = now - at_step_start;
    result->steps.push_back(step);
    at_step_start = now;
    step = StepResult{};
    ++next_step;
  };
  const auto bad = [&](const TraceEvent& e, const std::string& what) {
    *error = trace_name + ":" + std::to_string(e.line) + ": " + what;
    return false;
  };
  for (std::size_t i = 0; i < limit; ++i) {
    if (measuring) {
      while (next_step < steps.size() && steps[next_step].end == i) close_step();
    }
    const TraceEvent& e = events[i];
    // The reader refuses these; events built elsewhere are checked too,
    // since every target's accounting trusts the sizes it is given.
    if (e.action != TraceAction::allocate_failure && e.size > runtime::kMaxTraceSize) {
      return bad(e, "size " + std::to_string(e.size) + " is over 256 TiB, more than any device holds");
    }
    const auto call_start = std::chrono::steady_clock::now();
    switch (e.action) {
      case TraceAction::allocate: {
        auto [it, fresh] = live.try_emplace(e.pointer, Live{0, e.size, e.line, false});
        if (!fresh) {
          return bad(e, "pointer " + hex(e.pointer) + " allocated twice without a free (first at line " +
                            std::to_string(it->second.line) + ")");
        }
        std::uint64_t address = 0;
        if (target.allocate(e.size, e.stream, &address)) {
          it->second.address = address;
          it->second.placed = true;
          if (measuring && options.record_allocations) record_lifetime(e, address, options, result, &it->second);
        } else if (measuring) {
          result->failed_allocations++;
          record_failure(e, target, options, result);
        }
        break;
      }
      case TraceAction::allocate_failure: {
        // The program asked and was refused: ask again, and give back what we
        // get. No target can serve more than kMaxTraceSize; asking would only
        // test its arithmetic.
        std::uint64_t address = 0;
        if (e.size <= runtime::kMaxTraceSize && target.allocate(e.size, e.stream, &address)) {
          target.free(address, e.stream);
        } else if (measuring) {
          result->failed_allocations++;
          record_failure(e, target, options, result);
        }
        break;
      }
      case TraceAction::free: {
        auto it = live.find(e.pointer);
        if (it == live.end()) {
          // A trace recorded mid-run frees blocks allocated before it began.
          if (!options.lenient) {
            return bad(e, "free of unknown pointer " + hex(e.pointer) +
                              " (a trace recorded mid-run? --lenient skips such frees)");
          }
          result->unknown_frees += measuring ? 1 : 0;
          break;
        }
        if (e.size != 0 && e.size != it->second.size) {
          return bad(e, "free of " + hex(e.pointer) + " says " + std::to_string(e.size) +
                            " bytes, but it was allocated with " + std::to_string(it->second.size) + " at line " +
                            std::to_string(it->second.line));
        }
        if (it->second.placed) target.free(it->second.address, e.stream);
        if (it->second.lifetime != kNotRecorded) {
          result->lifetimes[it->second.lifetime].end_us = e.time_us;
          result->lifetimes[it->second.lifetime].freed = true;
        }
        live.erase(it);
        break;
      }
    }
    in_target += std::chrono::steady_clock::now() - call_start;
    if (!measuring) {
      if (i + 1 == stop_after) result->peak_layout = target.layout();
      if (next_moment < moments.size() && i + 1 == moments[next_moment]) {
        const Counters c = target.counters();
        result->moments.push_back(LayoutMoment{e.time_us, c.live_bytes, c.reserved_bytes, merged_layout(target)});
        ++next_moment;
      }
      continue;
    }
    const Counters c = target.counters();
    if (c.live_bytes > result->peak_live_bytes) {
      result->peak_live_bytes = c.live_bytes;
      pass->peak_event = i + 1;
      const Fragmentation f = target.fragmentation();
      result->external_fragmentation_at_peak =
          f.free_bytes == 0 ? 0.0
                            : 1.0 - static_cast<double>(std::min(f.largest_free_block, f.free_bytes)) /
                                        static_cast<double>(f.free_bytes);
      result->internal_waste_at_peak = c.handed_out_bytes - c.live_bytes;
    }
    result->peak_reserved_bytes = std::max(result->peak_reserved_bytes, c.reserved_bytes);
    step.peak_live_bytes = std::max(step.peak_live_bytes, c.live_bytes);
    step.peak_reserved_bytes = std::max(step.peak_reserved_bytes, c.reserved_bytes);
    if (i % stride == 0 || i + 1 == limit)
      result->timeline.push_back(Sample{e.time_us, c.live_bytes, c.reserved_bytes});
    if (options.progress && (i % 4096 == 0 || i + 1 == limit))
      show_progress(options, trace_name, target.name(), i + 1, limit, started);
  }
  if (measuring) {
    while (next_step < steps.size()) close_step();
    result->driver_calls = at_step_start;  // everything since the target was made
    const auto elapsed = in_target;
    result->events = events.size();
    result->ns_per_event =
        events.empty() ? 0.0
                       : std::chrono::duration<double, std::nano>(elapsed).count() / static_cast<double>(events.size());
    const Counters c = target.counters();
    result->maps = c.maps;
    result->unmaps = c.unmaps;
    result->evicted_bytes = c.evicted_bytes;
    result->utilization = result->peak_reserved_bytes == 0 ? 1.0
                                                           : static_cast<double>(result->peak_live_bytes) /
                                                                 static_cast<double>(result->peak_reserved_bytes);
  }
  return true;
}

}  // namespace

StepResult last_step(const Result& result) { return result.steps.empty() ? StepResult{} : result.steps.back(); }

bool run_replay(const std::string& trace_name, const std::vector<TraceEvent>& events, const std::string& policy,
                const TargetOptions& target_options, const ReplayOptions& options, Result* result, std::string* error) {
  result->trace = trace_name;
  result->policy = policy;
  result->frees = target_options.frees;
  result->lag_us = target_options.lag_us;
  result->host_us = target_options.lag_us > 0 ? target_options.host_us : -1;
  result->device_limit_bytes = device_limit_of(target_options, &result->device_limit_given);
  if (result->device_limit_given) {
    result->budget_changes.push_back(
        BudgetChange{events.empty() ? 0 : events.front().time_us, result->device_limit_bytes});
  }
  const std::vector<Step> steps =
      options.step_count == 0 ? detect_steps(events) : split_steps(events, options.step_count);
  Pass pass;
  {
    auto target = make_target(policy, target_options, error);
    if (!target) return false;
    if (!replay_pass(trace_name, events, steps, *target, 0, options, result, &pass, error)) return false;
  }
  if (options.want_layout && pass.peak_event > 0) {
    auto target = make_target(policy, target_options, error);
    if (!target) return false;
    Result scratch;
    Pass ignored;
    ReplayOptions quiet = options;
    quiet.progress = false;
    // Moments after 1/K, 2/K, ... K/K of the events.
    std::vector<std::size_t> moments;
    for (std::size_t k = 1; k <= options.layout_moments; ++k) {
      const std::size_t at = k * events.size() / options.layout_moments;
      if (at > 0 && (moments.empty() || at > moments.back())) moments.push_back(at);
    }
    if (!replay_pass(trace_name, events, steps, *target, pass.peak_event, quiet, &scratch, &ignored, error, moments)) {
      return false;
    }
    result->peak_layout = std::move(scratch.peak_layout);
    result->moments = std::move(scratch.moments);
  }
  return true;
}

}  // namespace tidepool::replay
