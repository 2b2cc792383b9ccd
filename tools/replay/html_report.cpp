// The HTML report: one offline file. The page is a Mustache template
// (report.html, filled by kainjow's mustache.hpp, which escapes what it
// places); this file builds its model: the tables, the table of contents and
// the run's metadata, so they read without scripts. The charts are drawn by
// report.js from the data embedded as JSON, with report.css; all three are
// inlined at build time (report_assets.hpp). Timelines are
// cut to a fixed number of buckets per trace, keeping each bucket's maxima,
// so the page size does not grow with the trace.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <kainjow/mustache.hpp>
#include <nlohmann/json.hpp>

#include "allocation_view.hpp"
#include "comparison.hpp"
#include "formatting.hpp"
#include "report_assets.hpp"
#include "report_template.hpp"
#include "reports.hpp"
#include "trace_notes.hpp"
#include "util/util.hpp"

namespace tidepool::replay {

namespace {

namespace mustache = kainjow::mustache;

// Points per timeline series: enough for a 1400-pixel chart, and a trace's
// whole data stays some tens of KiB.
constexpr std::size_t kTimelineBuckets = 800;
// Out-of-memory marks drawn per result; more would be one red band anyway.
constexpr std::size_t kMaxOomMarks = 2000;

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

// ---- the page's model: what report.html's tags name ----

using Model = mustache::data;

Model list() { return Model(Model::type::list); }

Model text_list(const std::vector<std::string>& items) {
  Model out = list();
  for (const std::string& item : items) out.push_back(item);
  return out;
}

// Baselines that beat the ★, said where the ★ is ("a baseline: cuda_malloc
// 99.41%"); empty when none does.
std::string ahead_text(const TraceGroup& g) {
  const std::vector<const Result*> ahead = baselines_ahead(g.runs, *g.runs[g.best]);
  if (ahead.empty()) return {};
  std::string out = ahead.size() == 1 ? "a baseline: " : "baselines: ";
  for (std::size_t i = 0; i < ahead.size(); ++i) {
    out += (i == 0 ? "" : ", ") + ahead[i]->policy + " " + fixed(100.0 * ahead[i]->utilization, 2) + "%";
  }
  return out;
}

// One row per policy of the summary table.
Model summary_runs(const TraceGroup& g) {
  const std::vector<const Result*> ahead = baselines_ahead(g.runs, *g.runs[g.best]);
  Model rows = list();
  for (std::size_t i = 0; i < g.runs.size(); ++i) {
    const Result& r = *g.runs[i];
    const StepResult last = last_step(r);
    Model row;
    row.set("best", i == g.best);
    row.set("beats_best", std::find(ahead.begin(), ahead.end(), &r) != ahead.end());
    row.set("policy", r.policy);
    row.set("peak_live", mib_text(r.peak_live_bytes));
    row.set("peak_reserved", mib_text(r.peak_reserved_bytes));
    row.set("utilization", fixed(100.0 * r.utilization, 2));
    row.set("fragmentation", fixed(r.external_fragmentation_at_peak, 4));
    row.set("waste", mib_text(r.internal_waste_at_peak));
    row.set("failed", count_text(r.failed_allocations));
    row.set("maps", count_text(r.maps));
    row.set("unmaps", count_text(r.unmaps));
    row.set("ns_per_event", fixed(r.ns_per_event, 0));
    row.set("vmm", count_text(last.calls.vmm()));
    row.set("syncs", count_text(last.calls.syncs()));
    row.set("event_calls", count_text(last.calls.events()));
    rows.push_back(row);
  }
  return rows;
}

// Steps down, policies across: what each policy pays per step.
void set_steps(const TraceGroup& g, Model* trace) {
  std::size_t steps = 0;
  for (const Result* r : g.runs) steps = std::max(steps, r->steps.size());
  trace->set("has_steps", steps != 0);
  std::vector<std::string> policies;
  for (const Result* r : g.runs) policies.push_back(r->policy);
  trace->set("step_policies", text_list(policies));
  Model rows = list();
  const Result& first = *g.runs.front();
  for (std::size_t s = 0; s < steps; ++s) {
    Model row;
    row.set("step", std::to_string(s) + (s == 0 ? " (setup)" : ""));
    row.set("events", s < first.steps.size() ? count_text(first.steps[s].events) : std::string());
    std::vector<std::string> cells;
    for (const Result* r : g.runs) {
      if (s >= r->steps.size()) {
        cells.emplace_back();
        continue;
      }
      const DriverCalls& c = r->steps[s].calls;
      cells.push_back(count_text(c.vmm()) + " / " + count_text(c.syncs()) + " / " + count_text(c.events()));
    }
    row.set("cells", text_list(cells));
    rows.push_back(row);
  }
  trace->set("steps", rows);
}

// Memory by owner: who held what at the trace's live peak, each one's own
// peak and what it asked for in all.
void set_owners(const AllocationView* view, Model* trace) {
  if (view == nullptr) return;
  trace->set("has_owners", view->named);
  trace->set("no_owners", !view->named);
  Model rows = list();
  for (const OwnerUsage* o : owners_at_peak(*view)) {
    const double share = view->peak_live_bytes == 0 ? 0.0
                                                    : 100.0 * static_cast<double>(o->live_at_peak_bytes) /
                                                          static_cast<double>(view->peak_live_bytes);
    Model row;
    row.set("named", !o->name.empty());
    row.set("name", o->name);
    row.set("kind", o->kind);
    row.set("allocations", count_text(o->allocations));
    row.set("at_peak", mib_text(o->live_at_peak_bytes));
    row.set("share", fixed(share, 1));
    row.set("own_peak", mib_text(o->peak_live_bytes));
    row.set("requested", mib_text(o->requested_bytes));
    rows.push_back(row);
  }
  trace->set("owners", rows);
}

Model trace_model(const TraceGroup& g, std::size_t index) {
  const Result& best = *g.runs[g.best];
  Model trace;
  trace.set("index", std::to_string(index));
  trace.set("first", index == 0);
  trace.set("id", "trace-" + std::to_string(index));
  trace.set("name", base_name(g.path));
  trace.set("events", count_text(best.events));
  trace.set("frees", free_mode_name(best.frees));
  trace.set("best_policy", best.policy);
  trace.set("best_utilization", fixed(100.0 * best.utilization, 2));
  trace.set("best_peak_reserved", mib_text(best.peak_reserved_bytes));
  trace.set("best_peak_live", mib_text(best.peak_live_bytes));
  if (const std::string ahead = ahead_text(g); !ahead.empty()) trace.set("ahead", ahead);
  if (const std::string origin = sample_origin(best); !origin.empty()) trace.set("origin", origin);
  trace.set("runs", summary_runs(g));
  set_owners(best.allocations.get(), &trace);
  set_steps(g, &trace);
  return trace;
}

// This replay against an earlier one (--compare): a row per matched run,
// the change toned by whether it is better (higher utilization, fewer bytes
// reserved, fewer failures) or worse.
Model changes_model(const Comparison& c) {
  // Toned only where the change shows at the two decimals printed.
  const auto tone = [](double better_by) -> std::string {
    return better_by >= 0.005 ? " class=\"better\"" : better_by <= -0.005 ? " class=\"worse\"" : "";
  };
  Model rows = list();
  for (const ComparedRun& r : c.runs) {
    const double du = r.after_utilization - r.before_utilization;
    const double before = static_cast<double>(r.before_peak_reserved);
    const double after = static_cast<double>(r.after_peak_reserved);
    // From nothing reserved, any growth is worse: shown as +100%.
    const double dp = before == 0 ? (after > 0 ? 100.0 : 0.0) : 100.0 * (after - before) / before;
    const double df = static_cast<double>(r.before_failed) - static_cast<double>(r.after_failed);
    Model row;
    row.set("trace", r.trace);
    row.set("policy", r.policy);
    row.set("frees", r.frees);
    row.set("utilization_before", fixed(100.0 * r.before_utilization, 2));
    row.set("utilization_now", fixed(100.0 * r.after_utilization, 2));
    row.set("utilization_change", (du >= 0 ? "+" : "") + fixed(100.0 * du, 2));
    row.set("utilization_tone", tone(100.0 * du));
    row.set("reserved_before", mib_text(r.before_peak_reserved));
    row.set("reserved_now", mib_text(r.after_peak_reserved));
    row.set("reserved_change", (dp >= 0 ? "+" : "") + fixed(dp, 2));
    row.set("reserved_tone", tone(-dp));
    row.set("failed_before", std::to_string(r.before_failed));
    row.set("failed_now", std::to_string(r.after_failed));
    row.set("failed_tone", tone(df));
    rows.push_back(row);
  }
  Model changes;
  changes.set("baseline_name", base_name(c.baseline));
  changes.set("baseline", c.baseline);
  changes.set("rows", rows);
  changes.set("has_unmatched", !c.unmatched.empty());
  changes.set("unmatched", text_list(c.unmatched));
  return changes;
}

// The run that recorded the trace (--run-report): its live figures per
// device, set against the replay of its own policy, and its memory by owner
// with the call sites behind each.
Model run_itself_model(const RunReport& report, const std::vector<Result>& results) {
  Model devices = list();
  for (const RunDevice& d : report.devices) {
    Model device;
    device.set("device", std::to_string(d.device));
    device.set("peak_reserved", mib_text(d.peak_reserved_bytes));
    device.set("peak_live", mib_text(d.peak_live_bytes));
    device.set("utilization", fixed(100.0 * d.utilization, 2));
    device.set("allocations", count_text(d.allocations));
    device.set("refused", count_text(d.ooms));
    device.set("passed", count_text(d.passthrough_allocations));
    device.set("evicted", d.eviction ? mib_text(d.evicted_bytes) : "off");
    device.set("has_owners", !d.owners.empty());
    Model owners = list();
    for (const RunOwner& o : d.owners) {
      Model owner;
      owner.set("known", !o.library.empty());
      owner.set("library", o.library);
      owner.set("owner", o.owner);
      owner.set("allocations", count_text(o.allocations));
      owner.set("at_peak", mib_text(o.live_at_peak_bytes));
      owner.set("live", mib_text(o.live_bytes));
      owner.set("refused", count_text(o.failures));
      owner.set("site_count", std::to_string(o.call_sites.size()));
      Model sites = list();
      for (const RunCallSite& c : o.call_sites) {
        Model site;
        site.set("function", c.function.empty() ? "(no symbol) " + c.offset : c.function);
        site.set("allocations", count_text(c.allocations));
        site.set("at_peak", mib_text(c.live_at_peak_bytes));
        site.set("own_peak", mib_text(c.peak_live_bytes));
        sites.push_back(site);
      }
      owner.set("sites", sites);
      owners.push_back(owner);
    }
    device.set("owners", owners);
    devices.push_back(device);
  }
  Model model;
  model.set("path", report.path);
  model.set("command", report.command);
  model.set("policy", report.policy);
  model.set("duration", fixed(report.duration_seconds, 1));
  model.set("devices", devices);
  if (const Result* replayed = replay_of_run(report, results)) {
    Model r;
    r.set("policy", replayed->policy);
    r.set("trace", base_name(replayed->trace));
    r.set("peak_reserved", mib_text(replayed->peak_reserved_bytes));
    r.set("utilization", fixed(100.0 * replayed->utilization, 2));
    model.set("replayed", r);
  }
  return model;
}

void set_run(const ReportRun& run, const std::vector<TraceGroup>& groups, const std::vector<std::string>& policies,
             Model* page) {
  Model items = list();
  const auto item = [&](const std::string& key, const std::string& value) {
    Model entry;
    entry.set("key", key);
    entry.set("value", value);
    items.push_back(entry);
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
  page->set("run_items", items);
  Model traces = list();
  const auto row = [&](const std::string& path, std::uint64_t events) {
    Model entry;
    entry.set("path", path);
    entry.set("events", count_text(events));
    traces.push_back(entry);
  };
  if (!run.traces.empty()) {
    for (const TraceInfo& t : run.traces) row(t.path, t.events);
  } else {
    for (const TraceGroup& g : groups) row(g.path, g.runs.front()->events);
  }
  page->set("run_traces", traces);
}

}  // namespace

std::string html_report(const std::vector<Result>& results, const ReportRun& run, const Comparison* comparison,
                        const RunReport* run_report) {
  const std::vector<TraceGroup> groups = group_by_trace(results);
  std::vector<std::string> policies;
  for (const Result& r : results) {
    if (std::find(policies.begin(), policies.end(), r.policy) == policies.end()) policies.push_back(r.policy);
  }
  Model page;
  page.set("css", kReportCss);
  page.set("js", kReportJs);
  page.set("counts", std::to_string(groups.size()) + (groups.size() == 1 ? " trace" : " traces") + " × " +
                         std::to_string(policies.size()) + (policies.size() == 1 ? " policy" : " policies"));
  // The options that change the figures, up front; the rest is under Run.
  Model options = list();
  for (const auto& [key, value] : run.options) {
    Model option;
    option.set("key", key);
    option.set("value", value);
    options.push_back(option);
  }
  page.set("options", options);
  if (!run.date.empty()) page.set("date", run.date);
  if (!run.host.empty()) page.set("host", run.host);
  Model traces = list();
  for (std::size_t i = 0; i < groups.size(); ++i) traces.push_back(trace_model(groups[i], i));
  page.set("traces", traces);
  if (comparison != nullptr) page.set("changes", changes_model(*comparison));
  if (run_report != nullptr) page.set("run_itself", run_itself_model(*run_report, results));
  set_run(run, groups, policies, &page);
  nlohmann::json data = {{"policies", policies}, {"traces", nlohmann::json::array()}};
  for (std::size_t i = 0; i < groups.size(); ++i) data["traces"].push_back(trace_json(groups[i], policies, i));
  page.set("data", script_json(data));

  mustache::mustache page_template(kReportTemplate);
  // The template is ours and checked by the tests: a parse error is a bug.
  if (!page_template.is_valid()) return "<!DOCTYPE html><p>report template: " + page_template.error_message();
  return page_template.render(page);
}

}  // namespace tidepool::replay
