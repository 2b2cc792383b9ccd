// Replaying events: trace pointers map to the target's addresses; metrics
// are sampled as the run goes; the layout at the live peak is captured by a
// second, deterministic pass that stops at the peak event. Driver calls are
// read at step boundaries only, so the count never costs a call per event.
#include "replay.hpp"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <unordered_map>

#include "steps.hpp"

namespace tidepool::replay {

bool load_trace(const std::string& path, std::vector<TraceEvent>* events, std::string* error, std::string* warning) {
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

void show_progress(const std::string& label, std::size_t done, std::size_t total) {
  const int width = 40;
  const int filled = total == 0 ? width : static_cast<int>(width * done / total);
  std::fprintf(stderr, "\r%-28.28s [%-*.*s] %3d%%", label.c_str(), width, filled,
               "========================================", total == 0 ? 100 : static_cast<int>(100 * done / total));
  if (done == total) std::fprintf(stderr, "\n");
}

std::string hex(std::uint64_t value) {
  char text[32];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

// A trace pointer's allocation. `placed` is false when the target refused it:
// the program was served, the target was not, and the free has nothing to give back.
struct Live {
  std::uint64_t address = 0;
  std::uint64_t size = 0;
  std::uint64_t line = 0;
  bool placed = false;
};

// One pass over the events, stopping after `stop_after` events (all when 0).
bool replay_pass(const std::string& trace_name, const std::vector<TraceEvent>& events, const std::vector<Step>& steps,
                 Target& target, std::size_t stop_after, const ReplayOptions& options, Result* result, Pass* pass,
                 std::string* error) {
  std::unordered_map<std::uint64_t, Live> live;  // trace pointer -> its allocation
  live.reserve(events.size());
  const std::size_t limit = stop_after == 0 ? events.size() : stop_after;
  const std::size_t stride =
      std::max<std::size_t>(1, events.size() / std::max<std::size_t>(1, options.timeline_points));
  const bool measuring = stop_after == 0;
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
        } else {
          result->failed_allocations += measuring ? 1 : 0;
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
        }
        break;
      }
      case TraceAction::free: {
        auto it = live.find(e.pointer);
        if (it == live.end()) return bad(e, "free of unknown pointer " + hex(e.pointer));
        if (e.size != 0 && e.size != it->second.size) {
          return bad(e, "free of " + hex(e.pointer) + " says " + std::to_string(e.size) +
                            " bytes, but it was allocated with " + std::to_string(it->second.size) + " at line " +
                            std::to_string(it->second.line));
        }
        if (it->second.placed) target.free(it->second.address, e.stream);
        live.erase(it);
        break;
      }
    }
    in_target += std::chrono::steady_clock::now() - call_start;
    if (!measuring) continue;
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
      show_progress(trace_name + " " + target.name(), i + 1, limit);
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
  } else {
    result->peak_layout = target.layout();
  }
  return true;
}

}  // namespace

bool run_replay(const std::string& trace_name, const std::vector<TraceEvent>& events, const std::string& policy,
                const TargetOptions& target_options, const ReplayOptions& options, Result* result, std::string* error) {
  result->trace = trace_name;
  result->policy = policy;
  result->frees = target_options.frees;
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
    if (!replay_pass(trace_name, events, steps, *target, pass.peak_event, quiet, &scratch, &ignored, error)) {
      return false;
    }
    result->peak_layout = std::move(scratch.peak_layout);
  }
  return true;
}

}  // namespace tidepool::replay
