// The HTML report: one offline file. The tables, the table of contents and
// the run's metadata are HTML written here, so they read without scripts;
// the charts are drawn by report.js from the data embedded as JSON, with
// report.css, both inlined at build time (report_assets.hpp). Timelines are
// cut to a fixed number of buckets per trace, keeping each bucket's maxima,
// so the page size does not grow with the trace.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "allocation_view.hpp"
#include "comparison.hpp"
#include "report_assets.hpp"
#include "reports.hpp"
#include "trace_notes.hpp"
#include "util/util.hpp"

namespace tidepool::replay {

namespace {

// Points per timeline series: enough for a 1400-pixel chart, and a trace's
// whole data stays some tens of KiB.
constexpr std::size_t kTimelineBuckets = 800;
// Out-of-memory marks drawn per result; more would be one red band anyway.
constexpr std::size_t kMaxOomMarks = 2000;

std::string escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string base_name(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string fixed(double value, int digits) {
  char buffer[48];
  std::snprintf(buffer, sizeof buffer, "%.*f", digits, value);
  return buffer;
}

std::string count_text(std::uint64_t n);

// MiB with one decimal and thousands separators: one unit down a column, and
// fine enough that policies a few MiB apart do not print alike.
std::string mib_text(std::uint64_t bytes) {
  const auto tenths = static_cast<std::uint64_t>(std::llround(static_cast<double>(bytes) / 104857.6));
  return count_text(tenths / 10) + "." + std::to_string(tenths % 10);
}

std::string count_text(std::uint64_t n) {
  std::string digits = std::to_string(n);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i != 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// JSON that cannot end the <script> element it sits in: '<', '>' and '&'
// only occur inside JSON strings, where their \u escapes mean the same.
std::string script_json(const nlohmann::json& value) {
  const std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '<': out += "\\u003c"; break;
      case '>': out += "\\u003e"; break;
      case '&': out += "\\u0026"; break;
      default: out += c;
    }
  }
  return out;
}

StepResult last_step(const Result& r) { return r.steps.empty() ? StepResult{} : r.steps.back(); }

struct TraceGroup {
  std::string path;
  std::vector<const Result*> runs;
  std::size_t best = 0;  // index into runs
};

std::vector<TraceGroup> group_by_trace(const std::vector<Result>& results) {
  std::vector<TraceGroup> groups;
  for (const Result& r : results) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const TraceGroup& g) { return g.path == r.trace; });
    if (it == groups.end()) {
      groups.push_back(TraceGroup{r.trace, {}, 0});
      it = groups.end() - 1;
    }
    it->runs.push_back(&r);
  }
  for (TraceGroup& g : groups) g.best = best_run(g.runs);
  return groups;
}

struct Series {
  std::vector<std::uint64_t> t, live, reserved;
};

// Each bucket keeps its first time and its highest live and reserved bytes,
// so no peak is lost; the last sample closes the series.
Series downsample(const std::vector<Sample>& samples, std::size_t buckets) {
  Series s;
  const std::size_t n = samples.size();
  if (n <= buckets + 1) {
    for (const Sample& x : samples) {
      s.t.push_back(x.time_us);
      s.live.push_back(x.live_bytes);
      s.reserved.push_back(x.reserved_bytes);
    }
    return s;
  }
  for (std::size_t k = 0; k < buckets; ++k) {
    const std::size_t begin = k * n / buckets;
    const std::size_t end = (k + 1) * n / buckets;
    std::uint64_t live = 0;
    std::uint64_t reserved = 0;
    for (std::size_t i = begin; i < end; ++i) {
      live = std::max(live, samples[i].live_bytes);
      reserved = std::max(reserved, samples[i].reserved_bytes);
    }
    s.t.push_back(samples[begin].time_us);
    s.live.push_back(live);
    s.reserved.push_back(reserved);
  }
  s.t.push_back(samples.back().time_us);
  s.live.push_back(samples.back().live_bytes);
  s.reserved.push_back(samples.back().reserved_bytes);
  return s;
}

// The bands chart's data: [begin, end, size, owner, line, freed] per band.
nlohmann::json allocations_json(const AllocationView* view) {
  if (view == nullptr) return nullptr;
  nlohmann::json owners = nlohmann::json::array();
  for (const OwnerUsage& o : view->owners) {
    owners.push_back({{"name", o.name}, {"kind", o.kind}, {"allocations", o.allocations}});
  }
  nlohmann::json bands = nlohmann::json::array();
  for (const Band& b : view->bands) bands.push_back({b.begin_us, b.end_us, b.size, b.owner, b.line, b.freed});
  return {{"times", view->times},        {"rest", view->rest},         {"bands", std::move(bands)},
          {"owners", std::move(owners)}, {"left_out", view->left_out}, {"count", view->allocations}};
}

// Memory by owner: who held what at the trace's live peak, each one's own
// peak and what it asked for in all.
std::string owners_table(const AllocationView* view) {
  if (view == nullptr) return {};
  if (!view->named) {
    return "<p class=\"note\">The trace names no owners (no Owner column: recorded by RMM, converted from a "
           "snapshot, or by an older tidepool). A trace written by <code>trace:</code> says which library asked for "
           "each allocation.</p>\n";
  }
  std::string out =
      "<table class=\"owners\"><thead><tr><th>owner</th><th>what it is</th><th>allocations</th><th>at the live peak "
      "(MiB)</th><th>share</th><th>own peak (MiB)</th><th>asked for in all (MiB)</th></tr></thead><tbody>\n";
  for (const OwnerUsage* o : owners_at_peak(*view)) {
    const double share = view->peak_live_bytes == 0 ? 0.0
                                                    : 100.0 * static_cast<double>(o->live_at_peak_bytes) /
                                                          static_cast<double>(view->peak_live_bytes);
    out += "<tr><td>" + (o->name.empty() ? std::string("<i>not named</i>") : escape(o->name)) + "</td><td>" +
           escape(o->kind) + "</td><td>" + count_text(o->allocations) + "</td><td>" + mib_text(o->live_at_peak_bytes) +
           "</td><td>" + fixed(share, 1) + "%</td><td>" + mib_text(o->peak_live_bytes) + "</td><td>" +
           mib_text(o->requested_bytes) + "</td></tr>\n";
  }
  return out + "</tbody></table>\n";
}

nlohmann::json trace_json(const TraceGroup& g, const std::vector<std::string>& policies, std::size_t index) {
  std::vector<Series> series;
  series.reserve(g.runs.size());
  for (const Result* r : g.runs) series.push_back(downsample(r->timeline, kTimelineBuckets));
  // Runs of one trace sample the same events, so they share the times, and
  // the live bytes too unless some allocation failed: sent once then.
  bool same_times = true;
  bool same_live = true;
  for (const Series& s : series) {
    same_times = same_times && s.t == series.front().t;
    same_live = same_live && s.live == series.front().live;
  }
  same_live = same_live && same_times;
  nlohmann::json runs = nlohmann::json::array();
  for (std::size_t i = 0; i < g.runs.size(); ++i) {
    const Result& r = *g.runs[i];
    const StepResult last = last_step(r);
    const auto policy =
        static_cast<std::size_t>(std::find(policies.begin(), policies.end(), r.policy) - policies.begin());
    nlohmann::json run = {{"policy", policy},
                          {"util", r.utilization},
                          {"peak_live", r.peak_live_bytes},
                          {"peak_reserved", r.peak_reserved_bytes},
                          {"failed", r.failed_allocations},
                          {"vmm", last.calls.vmm()},
                          {"syncs", last.calls.syncs()},
                          {"evcalls", last.calls.events()},
                          {"budget", r.budget_changes.empty() ? 0 : r.budget_changes.back().bytes},
                          {"reserved", series[i].reserved}};
    if (!same_times) run["t"] = series[i].t;
    if (!same_live) run["live"] = series[i].live;
    nlohmann::json ooms = nlohmann::json::array();
    const std::size_t n = r.failures.size();
    const std::size_t step = std::max<std::size_t>(1, (n + kMaxOomMarks - 1) / kMaxOomMarks);
    for (std::size_t k = 0; k < n; k += step) ooms.push_back(r.failures[k].time_us);
    run["ooms"] = std::move(ooms);
    nlohmann::json layout = nlohmann::json::array();
    for (const Span& s : r.peak_layout) {
      const auto size = static_cast<std::int64_t>(s.size);
      layout.push_back(s.used ? size : -size);
    }
    run["layout"] = std::move(layout);
    // The pool at evenly spaced moments, for the time slider (same signed
    // sizes as `layout`, with same-kind neighbours merged).
    nlohmann::json moments = nlohmann::json::array();
    for (const LayoutMoment& m : r.moments) {
      nlohmann::json spans = nlohmann::json::array();
      for (const Span& s : m.layout) {
        const auto size = static_cast<std::int64_t>(s.size);
        spans.push_back(s.used ? size : -size);
      }
      moments.push_back(
          {{"t", m.time_us}, {"live", m.live_bytes}, {"reserved", m.reserved_bytes}, {"layout", std::move(spans)}});
    }
    run["moments"] = std::move(moments);
    runs.push_back(std::move(run));
  }
  nlohmann::json trace = {{"name", base_name(g.path)},
                          {"anchor", "trace-" + std::to_string(index)},
                          {"events", g.runs.front()->events},
                          {"best", g.best},
                          {"t", series.front().t},
                          {"runs", std::move(runs)}};
  trace["live"] = same_live ? nlohmann::json(series.front().live) : nlohmann::json(nullptr);
  // Where each detected step after the first begins, on the timeline's
  // clock: every run of a trace shares its steps.
  nlohmann::json step_starts = nlohmann::json::array();
  const auto& steps = g.runs.front()->steps;
  for (std::size_t s = 1; s < steps.size(); ++s) step_starts.push_back(steps[s].begin_us);
  trace["steps"] = std::move(step_starts);
  trace["allocations"] = allocations_json(g.runs.front()->allocations.get());
  return trace;
}

std::string shell_quote(const std::string& arg) {
  if (!arg.empty() &&
      arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") ==
          std::string::npos) {
    return arg;
  }
  std::string out = "'";
  for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string run_section(const ReportRun& run, const std::vector<TraceGroup>& groups,
                        const std::vector<std::string>& policies) {
  std::string out = "<section id=\"run\"><h2>Run</h2>\n<dl class=\"run\">";
  const auto item = [&](const std::string& key, const std::string& value) {
    out += "<dt>" + escape(key) + "</dt><dd>" + escape(value) + "</dd>";
  };
  item("tidepool", run.version.empty() ? std::string(util::version()) : run.version);
  if (!run.argv.empty()) {
    std::string command;
    for (const std::string& a : run.argv) {
      if (!command.empty()) command += ' ';  // not `(...) + quote`: GCC 12's -Wrestrict false positive at -O3
      command += shell_quote(a);
    }
    item("command", command);
  }
  if (!run.date.empty()) item("date", run.date);
  if (!run.host.empty()) item("host", run.host);
  std::string names;
  for (const std::string& p : policies) names += (names.empty() ? "" : ", ") + p;
  item("policies", names);
  for (const auto& [key, value] : run.options) item(key, value);
  out += "</dl>\n<table><tr><th class=\"name\">trace</th><th>events</th></tr>\n";
  if (!run.traces.empty()) {
    for (const TraceInfo& t : run.traces) {
      out += "<tr><td class=\"name\">" + escape(t.path) + "</td><td>" + count_text(t.events) + "</td></tr>\n";
    }
  } else {
    for (const TraceGroup& g : groups) {
      out += "<tr><td class=\"name\">" + escape(g.path) + "</td><td>" + count_text(g.runs.front()->events) +
             "</td></tr>\n";
    }
  }
  return out + "</table></section>\n";
}

std::string summary_table(const std::vector<TraceGroup>& groups) {
  std::string out =
      "<table><tr><th class=\"name\">policy</th><th>peak live MiB</th><th>peak reserved MiB</th><th>utilization</th>"
      "<th>ext. frag at peak</th><th>waste at peak MiB</th><th>failed</th><th>maps</th><th>unmaps</th>"
      "<th>ns/event</th><th>last step vmm calls</th><th>last step syncs</th><th>last step event calls</th></tr>\n";
  std::size_t index = 0;
  for (const TraceGroup& g : groups) {
    out += "<tr class=\"group\"><td colspan=\"13\"><a href=\"#trace-" + std::to_string(index++) + "\">" +
           escape(base_name(g.path)) + "</a> · " + count_text(g.runs.front()->events) + " events</td></tr>\n";
    const std::vector<const Result*> ahead = baselines_ahead(g.runs, *g.runs[g.best]);
    for (std::size_t i = 0; i < g.runs.size(); ++i) {
      const Result& r = *g.runs[i];
      const bool best = i == g.best;
      const bool beats_best = std::find(ahead.begin(), ahead.end(), &r) != ahead.end();
      const StepResult last = last_step(r);
      out += std::string(best         ? "<tr class=\"best\">"
                         : beats_best ? "<tr class=\"ahead\">"
                                      : "<tr>") +
             "<td class=\"name\">" + (best ? "<span class=\"star\">★</span> " : "") + escape(r.policy) +
             (beats_best ? " <span class=\"ahead\" title=\"a baseline ahead of the ★\">▲</span>" : "") + "</td><td>" +
             mib_text(r.peak_live_bytes) + "</td><td>" + mib_text(r.peak_reserved_bytes) + "</td><td>" +
             fixed(100.0 * r.utilization, 2) + "%</td><td>" + fixed(r.external_fragmentation_at_peak, 4) + "</td><td>" +
             mib_text(r.internal_waste_at_peak) + "</td><td>" + count_text(r.failed_allocations) + "</td><td>" +
             count_text(r.maps) + "</td><td>" + count_text(r.unmaps) + "</td><td>" + fixed(r.ns_per_event, 0) +
             "</td><td>" + count_text(last.calls.vmm()) + "</td><td>" + count_text(last.calls.syncs()) + "</td><td>" +
             count_text(last.calls.events()) + "</td></tr>\n";
    }
  }
  return out + "</table>\n";
}

// Steps down, policies across: what each policy pays per step.
std::string steps_table(const TraceGroup& g) {
  std::size_t steps = 0;
  for (const Result* r : g.runs) steps = std::max(steps, r->steps.size());
  if (steps == 0) return "<p class=\"note\">no steps</p>\n";
  std::string out = "<table><tr><th>step</th><th>events</th>";
  for (const Result* r : g.runs) out += "<th>" + escape(r->policy) + "<br>vmm / syncs / events</th>";
  out += "</tr>\n";
  for (std::size_t s = 0; s < steps; ++s) {
    out += "<tr><td>" + std::to_string(s) + (s == 0 ? " (setup)" : "") + "</td><td>";
    const Result& first = *g.runs.front();
    out += s < first.steps.size() ? count_text(first.steps[s].events) : "";
    out += "</td>";
    for (const Result* r : g.runs) {
      out += "<td>";
      if (s < r->steps.size()) {
        const DriverCalls& c = r->steps[s].calls;
        out += count_text(c.vmm()) + " / " + count_text(c.syncs()) + " / " + count_text(c.events());
      }
      out += "</td>";
    }
    out += "</tr>\n";
  }
  return out + "</table>\n";
}

// Baselines that beat the ★, said where the ★ is: " (ahead of it, a
// baseline: cuda_malloc 99.41%)", or nothing.
std::string ahead_text(const TraceGroup& g) {
  const std::vector<const Result*> ahead = baselines_ahead(g.runs, *g.runs[g.best]);
  if (ahead.empty()) return {};
  std::string out = " <span class=\"ahead\">(ahead of it, ";
  out += ahead.size() == 1 ? "a baseline: " : "baselines: ";
  for (std::size_t i = 0; i < ahead.size(); ++i) {
    out += (i == 0 ? "" : ", ") + escape(ahead[i]->policy) + " " + fixed(100.0 * ahead[i]->utilization, 2) + "%";
  }
  return out + ")</span>";
}

// How a sample trace was recorded, where its section begins.
std::string origin_note(const Result& r) {
  const std::string origin = sample_origin(r);
  return origin.empty() ? std::string()
                        : "<p class=\"note origin\">" + escape(base_name(r.trace)) + ": " + escape(origin) + ".</p>\n";
}

// One line naming each trace's winner, for the reader who looks no further.
std::string best_list(const std::vector<TraceGroup>& groups) {
  std::string out = "<p class=\"winners\">";
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const Result& best = *groups[i].runs[groups[i].best];
    out += std::string(i == 0 ? "" : " · ") + "<a href=\"#trace-" + std::to_string(i) + "\">" +
           escape(base_name(groups[i].path)) + "</a>: <span class=\"star\">★</span> <b>" + escape(best.policy) +
           "</b> " + fixed(100.0 * best.utilization, 2) + "%" + ahead_text(groups[i]);
  }
  return out + "</p>\n";
}

// The run that recorded the trace (--run-report): its live figures per
// device, set against the replay of its own policy, and its memory by owner
// with the call sites behind each.
std::string run_itself_section(const RunReport& report, const std::vector<Result>& results) {
  std::string out = "<section id=\"run-itself\"><h2>The run itself</h2>\n<p>From <code>" + escape(report.path) +
                    "</code>: <code>" + escape(report.command) + "</code>, policy <b>" + escape(report.policy) +
                    "</b>, " + fixed(report.duration_seconds, 1) + " s.</p>\n";
  const Result* replayed = replay_of_run(report, results);
  out +=
      "<table class=\"run-devices\"><thead><tr><th>device</th><th>peak reserved (MiB)</th><th>live peak "
      "(MiB)</th><th>utilization</th><th>allocations</th><th>refused</th><th>passed to the driver</th><th>evicted "
      "(MiB)</th></tr></thead><tbody>\n";
  for (const RunDevice& d : report.devices) {
    out += "<tr><td>" + std::to_string(d.device) + "</td><td>" + mib_text(d.peak_reserved_bytes) + "</td><td>" +
           mib_text(d.peak_live_bytes) + "</td><td>" + fixed(100.0 * d.utilization, 2) + "%</td><td>" +
           count_text(d.allocations) + "</td><td>" + count_text(d.ooms) + "</td><td>" +
           count_text(d.passthrough_allocations) + "</td><td>" + (d.eviction ? mib_text(d.evicted_bytes) : "off") +
           "</td></tr>\n";
  }
  out += "</tbody></table>\n";
  if (replayed != nullptr) {
    out += "<p>Its replay under <b>" + escape(replayed->policy) + "</b> (" + escape(base_name(replayed->trace)) +
           "): peak reserved " + mib_text(replayed->peak_reserved_bytes) + " MiB, utilization " +
           fixed(100.0 * replayed->utilization, 2) +
           "%. The replay sees the trace's order on one simulated device; the run's own streams and the device's "
           "lag behind the host differ, so the two need not agree.</p>\n";
  } else {
    out += "<p class=\"note\">Its policy, " + escape(report.policy) +
           ", was not among those replayed: add <code>"
           "--policy " +
           escape(report.policy) + "</code> to set the two side by side.</p>\n";
  }
  for (const RunDevice& d : report.devices) {
    if (d.owners.empty()) continue;
    out += "<h3>Device " + std::to_string(d.device) +
           ": memory by owner</h3>\n<table class=\"owners\"><thead><tr><th>owner</th><th>what it is</th>"
           "<th>allocations</th><th>at the live peak (MiB)</th><th>live at the end (MiB)</th><th>refused</th>"
           "<th>call sites</th></tr></thead><tbody>\n";
    for (const RunOwner& o : d.owners) {
      std::string sites = "<details><summary>" + std::to_string(o.call_sites.size()) + "</summary><ul>";
      for (const RunCallSite& c : o.call_sites) {
        sites += "<li><code>" + escape(c.function.empty() ? "(no symbol) " + c.offset : c.function) +
                 "</code>: " + count_text(c.allocations) + " allocations, " + mib_text(c.live_at_peak_bytes) +
                 " MiB at the peak, its own peak " + mib_text(c.peak_live_bytes) + " MiB</li>";
      }
      sites += "</ul></details>";
      out += "<tr><td>" + (o.library.empty() ? std::string("<i>not known</i>") : escape(o.library)) + "</td><td>" +
             escape(o.owner) + "</td><td>" + count_text(o.allocations) + "</td><td>" + mib_text(o.live_at_peak_bytes) +
             "</td><td>" + mib_text(o.live_bytes) + "</td><td>" + count_text(o.failures) + "</td><td>" + sites +
             "</td></tr>\n";
    }
    out += "</tbody></table>\n";
  }
  return out + "</section>\n";
}

// This replay against an earlier one (--compare): a row per matched run,
// the change coloured by whether it is better (higher utilization, fewer
// bytes reserved, fewer failures) or worse.
std::string changes_section(const Comparison& c) {
  std::string out = "<section id=\"changes\"><h2>Compared with " + escape(base_name(c.baseline)) +
                    "</h2>\n<p class=\"note\">Runs matched by trace file name, policy and free mode against the JSON "
                    "lines of an earlier replay (<code>" +
                    escape(c.baseline) +
                    "</code>). Green: better now (higher utilization, less reserved, fewer failed allocations); red: "
                    "worse.</p>\n<table class=\"changes\"><thead><tr><th>trace</th><th>policy</th><th>frees</th>"
                    "<th>utilization before</th><th>now</th><th>change</th><th>peak reserved before</th><th>now</th>"
                    "<th>change</th><th>failed before</th><th>now</th></tr></thead><tbody>\n";
  // Coloured only where the change shows at the two decimals printed.
  const auto tone = [](double better_by) {
    return better_by >= 0.005 ? " class=\"better\"" : better_by <= -0.005 ? " class=\"worse\"" : "";
  };
  for (const ComparedRun& r : c.runs) {
    const double du = r.after_utilization - r.before_utilization;
    const double before = static_cast<double>(r.before_peak_reserved);
    const double after = static_cast<double>(r.after_peak_reserved);
    // From nothing reserved, any growth is worse: shown as +100%.
    const double dp = before == 0 ? (after > 0 ? 100.0 : 0.0) : 100.0 * (after - before) / before;
    const double df = static_cast<double>(r.before_failed) - static_cast<double>(r.after_failed);
    out += "<tr><td>" + escape(r.trace) + "</td><td>" + escape(r.policy) + "</td><td>" + escape(r.frees) + "</td><td>" +
           fixed(100.0 * r.before_utilization, 2) + "%</td><td>" + fixed(100.0 * r.after_utilization, 2) + "%</td><td" +
           tone(100.0 * du) + ">" + (du >= 0 ? "+" : "") + fixed(100.0 * du, 2) + " pt</td><td>" +
           mib_text(r.before_peak_reserved) + " MiB</td><td>" + mib_text(r.after_peak_reserved) + " MiB</td><td" +
           tone(-dp) + ">" + (dp >= 0 ? "+" : "") + fixed(dp, 2) + "%</td><td>" + std::to_string(r.before_failed) +
           "</td><td" + tone(df) + ">" + std::to_string(r.after_failed) + "</td></tr>\n";
  }
  out += "</tbody></table>\n";
  if (!c.unmatched.empty()) {
    out += "<p class=\"note\">Not compared:</p><ul class=\"note\">";
    for (const std::string& u : c.unmatched) out += "<li>" + escape(u) + "</li>";
    out += "</ul>\n";
  }
  return out + "</section>\n";
}

}  // namespace

std::string html_report(const std::vector<Result>& results, const ReportRun& run, const Comparison* comparison,
                        const RunReport* run_report) {
  const std::vector<TraceGroup> groups = group_by_trace(results);
  std::vector<std::string> policies;
  for (const Result& r : results) {
    if (std::find(policies.begin(), policies.end(), r.policy) == policies.end()) policies.push_back(r.policy);
  }

  std::string out =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
      "<title>tidepool replay report</title>\n<style>\n";
  out += kReportCss;
  out += "</style></head><body>\n";

  // Table of contents.
  out +=
      "<nav id=\"toc\"><b>Contents</b><ol><li><a href=\"#compare\">Policies compared</a></li><li><a "
      "href=\"#summary\">Summary table</a></li>";
  if (comparison != nullptr) out += "<li><a href=\"#changes\">Compared with an earlier replay</a></li>";
  if (run_report != nullptr) out += "<li><a href=\"#run-itself\">The run itself</a></li>";
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const std::string id = "trace-" + std::to_string(i);
    const TraceGroup& g = groups[i];
    out += "<li><a href=\"#" + id + "\">" + escape(base_name(g.path)) + "</a> <span class=\"best-tag\">★ " +
           escape(g.runs[g.best]->policy) + "</span><ol><li><a href=\"#" + id +
           "-timeline\">memory over time</a></li><li><a href=\"#" + id +
           "-pool\">the pool, at the peak and at moments</a></li><li><a href=\"#" + id +
           "-allocations\">allocations and owners</a></li><li><a href=\"#" + id +
           "-steps\">driver calls per step</a></li></ol></li>";
  }
  out += "<li><a href=\"#run\">Run</a></li></ol></nav>\n<main>\n<h1>tidepool replay report</h1>\n<p class=\"sub\">" +
         std::to_string(groups.size()) + (groups.size() == 1 ? " trace" : " traces") + " × " +
         std::to_string(policies.size()) + (policies.size() == 1 ? " policy" : " policies");
  // The options that change the figures, up front; the rest is under Run.
  for (const auto& [key, value] : run.options) out += " · " + escape(key) + ": " + escape(value);
  out += std::string(run.date.empty() ? "" : " · " + escape(run.date)) +
         (run.host.empty() ? "" : " · " + escape(run.host)) + " · <a href=\"#run\">run details</a></p>\n";

  out +=
      "<section id=\"compare\"><h2>Policies compared</h2>\n<p>★ marks each trace's best tidepool policy: the fewest "
      "failed allocations, then the highest utilization (peak live bytes over peak reserved bytes: the device memory "
      "a policy needs for the trace). The baselines (pytorch_rules, rmm_pool, cuda_malloc) emulate other allocators "
      "for reference and are not starred; see their driver calls below.</p>\n" +
      best_list(groups) +
      "<h3>Utilization</h3>\n"
      "<div class=\"chart\" id=\"chart-utilization\" data-chart=\"utilization\"></div>\n"
      "<h3>Driver calls in the last step</h3>\n<p class=\"note\">The last step stands for every later one: a training "
      "loop pays these calls each step. Upper bar: VMM calls (cuMemCreate, Map, SetAccess, Unmap, Release; a "
      "baseline's segment allocations and frees); lower bar: synchronisations (cuCtxSynchronize, "
      "cuStreamSynchronize). Log scale; hover for event calls.</p>\n"
      "<div class=\"chart\" id=\"chart-calls\" data-chart=\"calls\"></div>\n</section>\n";

  out += "<section id=\"summary\"><h2>Summary table</h2>\n" + summary_table(groups) + "</section>\n";
  if (comparison != nullptr) out += changes_section(*comparison);
  if (run_report != nullptr) out += run_itself_section(*run_report, results);

  for (std::size_t i = 0; i < groups.size(); ++i) {
    const std::string id = "trace-" + std::to_string(i);
    const TraceGroup& g = groups[i];
    const Result& best = *g.runs[g.best];
    out += "<section id=\"" + id + "\"><h2>" + escape(base_name(g.path)) + "</h2>\n<p>" + count_text(best.events) +
           " events, frees: " + free_mode_name(best.frees) + ". Best: <b>★ " + escape(best.policy) +
           "</b>, utilization " + fixed(100.0 * best.utilization, 2) + "%, peak reserved " +
           mib_text(best.peak_reserved_bytes) + " MiB for a live peak of " + mib_text(best.peak_live_bytes) + " MiB" +
           ahead_text(g) + ".</p>\n" + origin_note(best) + "<h3 id=\"" + id +
           "-timeline\">Live and reserved bytes over time</h3>\n<div class=\"chart\" id=\"" + id +
           "-timeline-chart\" data-chart=\"timeline\" data-trace=\"" + std::to_string(i) + "\"></div>\n<h3 id=\"" + id +
           "-pool\">The pool at the live peak, and at moments of the trace</h3>\n<div class=\"chart\" id=\"" + id +
           "-pool-chart\" data-chart=\"pool\" data-trace=\"" + std::to_string(i) + "\"></div>\n<h3 id=\"" + id +
           "-allocations\">Allocations over time, and who owns them</h3>\n<div class=\"chart\" id=\"" + id +
           "-bands-chart\" data-chart=\"bands\" data-trace=\"" + std::to_string(i) + "\"></div>\n" +
           owners_table(best.allocations.get()) + "<h3 id=\"" + id +
           "-steps\">Driver calls per step</h3>\n<details><summary>every step, every policy (step 0 holds the "
           "setup)</summary>\n" +
           steps_table(g) + "</details>\n</section>\n";
  }

  nlohmann::json data = {{"policies", policies}, {"traces", nlohmann::json::array()}};
  for (std::size_t i = 0; i < groups.size(); ++i) data["traces"].push_back(trace_json(groups[i], policies, i));
  out += run_section(run, groups, policies);
  out += "<noscript><p>The charts need JavaScript; the tables hold every figure.</p></noscript>\n</main>\n";
  out += "<script type=\"application/json\" id=\"report-data\">" + script_json(data) + "</script>\n<script>\n";
  out += kReportJs;
  out += "</script>\n</body></html>\n";
  return out;
}

}  // namespace tidepool::replay
