// The Chrome trace-event file (JSON, for Perfetto or chrome://tracing): one
// process per (trace, policy) holding the live and reserved counters, one
// async slice per allocation from its allocate to its free, grouped on a
// track per stream (async events group by name), and instant markers for
// failed allocations and the device budget. Times are the trace's own
// microseconds. Written by hand, not through a JSON tree: a trace's slices
// run to hundreds of thousands of events.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "formatting.hpp"
#include "reports.hpp"

namespace tidepool::replay {

namespace {

std::string json_string(const std::string& text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The time live bytes first peaked, as the timeline saw it.
std::uint64_t peak_time(const Result& r) {
  std::uint64_t best = 0;
  std::uint64_t time = r.timeline.empty() ? 0 : r.timeline.front().time_us;
  for (const Sample& s : r.timeline) {
    if (s.live_bytes > best) {
      best = s.live_bytes;
      time = s.time_us;
    }
  }
  return time;
}

// Which lifetimes get a slice when there is room for `quota` only: those live
// at the live peak first (they make the peak), then the allocations made
// nearest the peak, before and after in turn. Returned in allocation order.
std::vector<std::size_t> pick_slices(const Result& r, std::size_t quota) {
  const std::size_t n = r.lifetimes.size();
  std::vector<std::size_t> picked;
  if (n <= quota) {
    picked.resize(n);
    for (std::size_t i = 0; i < n; ++i) picked[i] = i;
    return picked;
  }
  const std::uint64_t peak = peak_time(r);
  std::vector<bool> taken(n, false);
  for (std::size_t i = 0; i < n && picked.size() < quota; ++i) {
    const Lifetime& l = r.lifetimes[i];
    if (l.begin_us <= peak && (!l.freed || l.end_us > peak)) {
      taken[i] = true;
      picked.push_back(i);
    }
  }
  std::size_t right =
      static_cast<std::size_t>(std::partition_point(r.lifetimes.begin(), r.lifetimes.end(),
                                                    [&](const Lifetime& l) { return l.begin_us <= peak; }) -
                               r.lifetimes.begin());
  std::size_t left = right;
  while (picked.size() < quota && (left > 0 || right < n)) {
    if (right < n) {
      if (!taken[right]) picked.push_back(right);
      ++right;
    }
    if (picked.size() < quota && left > 0) {
      --left;
      if (!taken[left]) picked.push_back(left);
    }
  }
  std::sort(picked.begin(), picked.end());
  return picked;
}

class Writer {
 public:
  void event(const std::string& body) {
    out_ += first_ ? "\n" : ",\n";
    out_ += "{" + body + "}";
    first_ = false;
  }
  std::string& text() { return out_; }

 private:
  std::string out_;
  bool first_ = true;
};

}  // namespace

std::string chrome_trace(const std::vector<Result>& results, const ChromeTraceOptions& options) {
  std::size_t with_slices = 0;
  for (const Result& r : results) with_slices += r.lifetimes.empty() ? 0 : 1;
  const std::size_t quota = with_slices == 0 ? 0 : options.max_slices / with_slices;

  Writer w;
  std::uint64_t slices = 0;
  std::uint64_t slices_left_out = 0;
  int pid = 0;
  for (const Result& r : results) {
    ++pid;
    const std::string p = ",\"pid\":" + std::to_string(pid);
    const std::string name = base_name(r.trace) + " " + r.policy;
    const std::vector<std::size_t> picked = pick_slices(r, quota);
    const std::uint64_t left_out = r.lifetimes.size() - picked.size() + r.lifetimes_dropped;
    w.event("\"name\":\"process_name\",\"ph\":\"M\",\"tid\":0" + p + ",\"args\":{\"name\":" + json_string(name) + "}");
    w.event("\"name\":\"process_sort_index\",\"ph\":\"M\",\"tid\":0" + p +
            ",\"args\":{\"sort_index\":" + std::to_string(pid) + "}");
    char utilization[32];
    std::snprintf(utilization, sizeof utilization, "utilization %.4f", r.utilization);
    std::string labels = utilization;
    if (left_out != 0) {
      labels += ", " + std::to_string(picked.size()) + " of " + std::to_string(picked.size() + left_out) +
                " allocation slices (those nearest the live peak)";
    }
    if (r.failures_dropped != 0) labels += ", " + std::to_string(r.failures_dropped) + " failures not marked";
    w.event("\"name\":\"process_labels\",\"ph\":\"M\",\"tid\":0" + p + ",\"args\":{\"labels\":" + json_string(labels) +
            "}");
    slices += picked.size();
    slices_left_out += left_out;

    for (const Sample& s : r.timeline) {
      w.event("\"name\":\"memory\",\"ph\":\"C\",\"tid\":0,\"ts\":" + std::to_string(s.time_us) + p +
              ",\"args\":{\"live_bytes\":" + std::to_string(s.live_bytes) +
              ",\"reserved_bytes\":" + std::to_string(s.reserved_bytes) + "}");
    }
    const std::uint64_t end_time = std::max(r.timeline.empty() ? 0 : r.timeline.back().time_us,
                                            r.lifetimes.empty() ? 0 : r.lifetimes.back().begin_us);
    for (std::size_t i : picked) {
      const Lifetime& l = r.lifetimes[i];
      const std::string common = "\"cat\":\"allocation\",\"name\":\"stream " + std::to_string(l.stream) +
                                 "\",\"id2\":{\"local\":\"" + std::to_string(i) + "\"},\"tid\":0" + p;
      w.event("\"ph\":\"b\"," + common + ",\"ts\":" + std::to_string(l.begin_us) +
              ",\"args\":{\"size\":" + std::to_string(l.size) + ",\"address\":\"" + hex(l.address) +
              "\",\"line\":" + std::to_string(l.line) + (l.freed ? "" : ",\"live_at_end\":true") + "}");
      w.event("\"ph\":\"e\"," + common +
              ",\"ts\":" + std::to_string(l.freed ? l.end_us : std::max(end_time, l.begin_us)));
    }
    for (const FailedAllocation& f : r.failures) {
      w.event("\"name\":\"out of memory\",\"cat\":\"oom\",\"ph\":\"i\",\"s\":\"p\",\"tid\":0,\"ts\":" +
              std::to_string(f.time_us) + p + ",\"args\":{\"size\":" + std::to_string(f.size) +
              ",\"stream\":" + std::to_string(f.stream) + ",\"line\":" + std::to_string(f.line) + ",\"live_bytes\":" +
              std::to_string(f.live_bytes) + ",\"reserved_bytes\":" + std::to_string(f.reserved_bytes) + "}");
    }
    for (const BudgetChange& b : r.budget_changes) {
      w.event("\"name\":\"device budget\",\"cat\":\"budget\",\"ph\":\"i\",\"s\":\"p\",\"tid\":0,\"ts\":" +
              std::to_string(b.time_us) + p + ",\"args\":{\"bytes\":" + std::to_string(b.bytes) + "}");
    }
  }
  // The format wants string values here.
  const std::string other = "{\"tool\":\"tidepool-replay\",\"allocation_slices\":\"" + std::to_string(slices) +
                            "\",\"allocation_slices_left_out\":\"" + std::to_string(slices_left_out) +
                            "\",\"slice_cap\":\"" + std::to_string(options.max_slices) +
                            " over all processes; past it each keeps the allocations live at its live peak and those "
                            "made nearest it\"}";
  std::string out = "{\"displayTimeUnit\":\"ms\",\"otherData\":" + other + ",\"traceEvents\":[";
  out += w.text();
  out += "\n]}\n";
  return out;
}

}  // namespace tidepool::replay
