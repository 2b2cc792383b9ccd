// Formatting replay results. The HTML report is one file with inline SVG:
// per trace and policy a live-vs-reserved timeline, a map of the pool at the
// live peak and the driver calls of each step, and the summary table. The
// last step stands for the steady state: its driver calls are the ones a
// training loop pays every step from then on.
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

std::string fixed(double value, int digits) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.*f", digits, value);
  return buffer;
}

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string base_name(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string timeline_svg(const Result& r) {
  const double width = 640;
  const double height = 160;
  std::uint64_t top = 1;
  std::uint64_t t_end = 1;
  for (const Sample& s : r.timeline) {
    top = std::max({top, s.live_bytes, s.reserved_bytes});
    t_end = std::max(t_end, s.time_us);
  }
  auto polyline = [&](bool reserved) {
    std::string points;
    for (const Sample& s : r.timeline) {
      const double x = width * static_cast<double>(s.time_us) / static_cast<double>(t_end);
      const double v = static_cast<double>(reserved ? s.reserved_bytes : s.live_bytes);
      const double y = height - height * v / static_cast<double>(top);
      points += fixed(x, 1) + "," + fixed(y, 1) + " ";
    }
    return points;
  };
  return "<svg viewBox=\"0 0 640 170\" width=\"640\" height=\"170\" role=\"img\">"
         "<rect x=\"0\" y=\"0\" width=\"640\" height=\"160\" class=\"plot\"/>"
         "<polyline class=\"reserved\" points=\"" + polyline(true) + "\"/>"
         "<polyline class=\"live\" points=\"" + polyline(false) + "\"/>"
         "<text x=\"4\" y=\"12\" class=\"axis\">" + mib(top) + " MiB</text></svg>";
}

std::string layout_svg(const Result& r) {
  if (r.peak_layout.empty()) return "<p class=\"note\">no layout captured</p>";
  std::uint64_t total = 0;
  for (const Span& s : r.peak_layout) total = std::max(total, s.offset + s.size);
  const double width = 640;
  std::string rects;
  for (const Span& s : r.peak_layout) {
    const double x = width * static_cast<double>(s.offset) / static_cast<double>(total);
    const double w = std::max(0.2, width * static_cast<double>(s.size) / static_cast<double>(total));
    rects += "<rect x=\"" + fixed(x, 2) + "\" y=\"0\" width=\"" + fixed(w, 2) + "\" height=\"24\" class=\"" +
             (s.used ? "used" : "free") + "\"/>";
  }
  return "<svg viewBox=\"0 0 640 24\" width=\"640\" height=\"24\" role=\"img\">" + rects + "</svg>";
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

std::string steps_table_html(const Result& r) {
  if (r.steps.empty()) return "";
  std::string out =
      "<table><tr><th>step</th><th>events</th><th>vmm calls</th><th>syncs</th><th>event calls</th>"
      "<th>peak live MiB</th><th>peak reserved MiB</th></tr>\n";
  for (std::size_t i = 0; i < r.steps.size(); ++i) {
    const StepResult& s = r.steps[i];
    out += "<tr><td>" + std::to_string(i) + "</td><td>" + std::to_string(s.events) + "</td><td>" +
           std::to_string(s.calls.vmm()) + "</td><td>" + std::to_string(s.calls.syncs()) + "</td><td>" +
           std::to_string(s.calls.events()) + "</td><td>" + mib(s.peak_live_bytes) + "</td><td>" +
           mib(s.peak_reserved_bytes) + "</td></tr>\n";
  }
  return out + "</table>\n";
}

}  // namespace

std::string table(const std::vector<Result>& results) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-22s %-14s %9s %12s %12s %8s %8s %8s %7s %8s | %6s %6s %7s\n", "trace", "policy",
                "events", "peak live", "peak resv", "util", "ext frag", "waste", "failed", "ns/event", "vmm", "syncs",
                "evcalls");
  out += line;
  for (const Result& r : results) {
    const StepResult last = last_step(r);
    std::snprintf(
        line, sizeof line, "%-22.22s %-14s %9llu %8s MiB %8s MiB %8.4f %8.4f %8s %7llu %8.0f | %6llu %6llu %7llu\n",
        base_name(r.trace).c_str(), r.policy.c_str(), static_cast<unsigned long long>(r.events),
        mib(r.peak_live_bytes).c_str(), mib(r.peak_reserved_bytes).c_str(), r.utilization,
        r.external_fragmentation_at_peak, mib(r.internal_waste_at_peak).c_str(),
        static_cast<unsigned long long>(r.failed_allocations), r.ns_per_event,
        static_cast<unsigned long long>(last.calls.vmm()), static_cast<unsigned long long>(last.calls.syncs()),
        static_cast<unsigned long long>(last.calls.events()));
    out += line;
  }
  out +=
      "(after |: driver calls in the last step. vmm: cuMemCreate/Map/SetAccess/Unmap/Release; syncs: "
      "cuCtxSynchronize, cuStreamSynchronize; evcalls: cuEventRecord/Query/Synchronize, cuStreamWaitEvent)\n";
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

std::string html_report(const std::vector<Result>& results) {
  std::string out =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>tidepool replay report</title>\n"
      "<style>body{font-family:sans-serif;margin:2em;color:#222}table{border-collapse:collapse}"
      "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#eee}"
      "td:first-child,td:nth-child(2){text-align:left}.plot{fill:#fafafa;stroke:#ccc}"
      ".live{fill:none;stroke:#1f77b4;stroke-width:1.5}.reserved{fill:none;stroke:#d62728;stroke-width:1.5}"
      ".used{fill:#1f77b4}.free{fill:#f2c14e}.axis{font-size:10px;fill:#555}.note{color:#777}"
      "section{margin-bottom:2em}h3{margin-bottom:0.2em}</style></head><body>\n"
      "<h1>tidepool replay report</h1>\n<p>utilization = peak live / peak reserved. "
      "Timelines: <span style=\"color:#1f77b4\">live</span> against <span style=\"color:#d62728\">reserved</span>. "
      "Pool maps at the live peak: <span style=\"color:#1f77b4\">used</span> and "
      "<span style=\"color:#c9a227\">free</span> blocks.</p>\n<h2>Summary</h2>\n<table><tr><th>trace</th><th>policy</th>"
      "<th>events</th><th>peak live MiB</th><th>peak reserved MiB</th><th>utilization</th><th>ext. frag at peak</th>"
      "<th>waste at peak MiB</th><th>failed</th><th>maps</th><th>unmaps</th><th>ns/event</th>"
      "<th>last step vmm calls</th><th>last step syncs</th><th>last step event calls</th></tr>\n";
  for (const Result& r : results) {
    out += "<tr><td>" + escape(base_name(r.trace)) + "</td><td>" + escape(r.policy) + "</td><td>" +
           std::to_string(r.events) + "</td><td>" + mib(r.peak_live_bytes) + "</td><td>" +
           mib(r.peak_reserved_bytes) + "</td><td>" + fixed(r.utilization, 4) + "</td><td>" +
           fixed(r.external_fragmentation_at_peak, 4) + "</td><td>" + mib(r.internal_waste_at_peak) + "</td><td>" +
           std::to_string(r.failed_allocations) + "</td><td>" + std::to_string(r.maps) + "</td><td>" +
           std::to_string(r.unmaps) + "</td><td>" + fixed(r.ns_per_event, 0) + "</td><td>" +
           std::to_string(last_step(r).calls.vmm()) + "</td><td>" + std::to_string(last_step(r).calls.syncs()) +
           "</td><td>" + std::to_string(last_step(r).calls.events()) + "</td></tr>\n";
  }
  out += "</table>\n";
  for (const Result& r : results) {
    out += "<section><h3>" + escape(base_name(r.trace)) + " — " + escape(r.policy) + "</h3>\n<p>utilization " +
           fixed(r.utilization, 4) + ", peak live " + mib(r.peak_live_bytes) + " MiB, peak reserved " +
           mib(r.peak_reserved_bytes) + " MiB, frees: " + free_mode_name(r.frees) + "</p>\n" + timeline_svg(r) +
           "\n<p>pool at the live peak</p>\n" + layout_svg(r) +
           "\n<p>driver calls per step (step 0 holds the setup)</p>\n" + steps_table_html(r) + "</section>\n";
  }
  out += "</body></html>\n";
  return out;
}

std::string chrome_trace(const std::vector<Result>& results) {
  nlohmann::json events = nlohmann::json::array();
  int pid = 1;
  for (const Result& r : results) {
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid},
                      {"args", {{"name", base_name(r.trace) + " " + r.policy}}}});
    for (const Sample& s : r.timeline) {
      events.push_back({{"name", "memory"}, {"ph", "C"}, {"ts", s.time_us}, {"pid", pid},
                        {"args", {{"live_bytes", s.live_bytes}, {"reserved_bytes", s.reserved_bytes}}}});
    }
    ++pid;
  }
  return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump();
}

}  // namespace tidepool::replay
