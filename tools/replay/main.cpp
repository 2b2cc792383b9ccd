// tidepool-replay: replays allocation traces against tidepool's placement
// policies and baseline allocators, on the simulated driver, and reports
// utilization and fragmentation. Bad input exits 2 with file:line; a trace
// cut short in its last line is replayed up to it, with a warning.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "comparison.hpp"
#include "output_file.hpp"
#include "replay.hpp"
#include "reports.hpp"
#include "run_report.hpp"
#include "runtime/runtime.hpp"
#include "util/util.hpp"

using namespace tidepool::replay;  // NOLINT(google-build-using-namespace): a tool's main

int main(int argc, char** argv) {
  CLI::App app{"Replay RMM-format allocation traces against tidepool's policies and baselines."};
  std::vector<std::string> policies;
  std::vector<std::string> traces;
  std::string device_limit;
  std::string json_path;
  std::string conf;
  std::string html;
  std::string chrome;
  std::string frees = "stream";
  std::size_t step_count = 0;
  double lag_us = 0;
  bool json = false;
  bool lenient = false;
  bool progress = false;
  app.set_version_flag("--version", std::string("tidepool-replay ") + tidepool::util::version());
  app.add_option("--policy", policies, "A policy or baseline (repeatable), or 'all'")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--device-limit,--device-memory", device_limit,
                 "A device budget, e.g. 8GiB, as the device_limit config key (--device-memory is the old name)");
  app.add_option("--conf", conf, "A TIDEPOOL_CONF string for tidepool's policies");
  app.add_option("--frees", frees,
                 "How tidepool's policies see the trace's frees: stream (cudaFreeAsync, the default) or device "
                 "(cudaFree/cuMemFree, as a preloaded cudaMalloc program makes them)")
      ->check(CLI::IsMember({"stream", "device"}));
  app.add_option("--lag-us", lag_us,
                 "How far the device lags, as bench_live_replay's --kernel-us: after each allocation tidepool's "
                 "policies queue this many microseconds of work on its stream, and fences finish when the work "
                 "before them has (default 0: none queued, every fence finished at once)")
      ->check(CLI::Range(0.0, tidepool::replay::kMaxLagMicroseconds).description(""));
  double host_us = TargetOptions::kDefaultHostMicroseconds;
  bool wall_clock = false;
  app.add_option("--host-us", host_us,
                 "With --lag-us: the host time each trace event takes on the simulated driver's virtual clock, on "
                 "which the lag's work runs, so that every run gives the same figures (default 1; set against "
                 "bench_live_replay's host takes per event on the sim)")
      ->check(CLI::Range(0.0, tidepool::replay::kMaxLagMicroseconds).description(""));
  app.add_flag("--wall-clock", wall_clock,
               "With --lag-us: run the lag's work in wall time on the sim's stream threads instead, as "
               "bench_live_replay does (figures then vary from run to run)");
  app.add_option("--steps", step_count,
                 "Split the trace into N equal training steps, 1 to 1000000 (default: detect them)")
      ->check(CLI::Range(1, 1000000).description(""))
      ->type_name("N");
  app.add_flag("--json", json, "One JSON object per (trace, policy) line on stdout, instead of the table");
  app.add_option("--json-out", json_path, "Also write the JSON lines to this file (the table stays on stdout)");
  std::string compare_path;
  app.add_option("--compare", compare_path,
                 "Set each run against an earlier replay's, from the JSON lines it wrote (--json or --json-out): a "
                 "table after this one, and a section of the HTML report");
  std::string run_report_path;
  app.add_option("--run-report", run_report_path,
                 "The JSON report of the run that recorded the trace (report:PATH): the run itself beside its "
                 "replays, with memory by owner and call site, under the table and as a section of the HTML report");
  app.add_flag("--lenient", lenient,
               "Replay a trace recorded mid-run: count and skip frees of blocks allocated before it began");
  app.add_flag("--progress", progress, "Show the progress line on stderr even when it is not a terminal");
  app.add_option("--html", html, "Write a self-contained HTML report here (gzipped if the name ends in .gz)");
  app.add_option("--chrome-trace", chrome,
                 "Write a Perfetto / Chrome trace here: live and reserved counters, one slice per allocation, "
                 "out-of-memory and budget markers. Name it .json.gz to have it gzipped (ui.perfetto.dev opens it)");
  ChromeTraceOptions chrome_options;
  app.add_option("--max-slices", chrome_options.max_slices,
                 "At most this many allocation slices in the --chrome-trace file, over all runs (those nearest each "
                 "run's live peak are kept; 0: counters and markers only)")
      ->capture_default_str();
  app.add_option("traces", traces, "RMM CSV traces (.csv or .csv.gz)")->required();
  app.footer("Policies: " + [] {
    std::string names;
    for (const auto& n : target_names()) names += n + " ";
    return names;
  }());
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  if (policies.empty()) policies = {"best_fit"};
  if (std::find(policies.begin(), policies.end(), "all") != policies.end()) policies = target_names();
  const auto names = target_names();
  for (const auto& p : policies) {
    if (std::find(names.begin(), names.end(), p) == names.end()) {
      std::fprintf(stderr, "tidepool-replay: unknown policy \"%s\"\n", p.c_str());
      return 2;
    }
  }
  TargetOptions target_options;
  target_options.conf = conf;
  // Checked once, for every target: the baselines take its device_limit too.
  if (const auto parsed = tidepool::runtime::parse_config(conf); parsed.passthrough) {
    std::fprintf(stderr, "tidepool-replay: --conf: %s\n", parsed.error.c_str());
    return 2;
  }
  (void)parse_free_mode(frees, &target_options.frees);  // checked by the parser
  target_options.lag_us = lag_us;
  target_options.host_us = wall_clock ? -1.0 : host_us;
  if (!device_limit.empty()) {
    auto spec = tidepool::util::parse_size(device_limit);
    if (!spec || spec->is_percent || spec->bytes < tidepool::runtime::kMinimumBudget) {
      std::fprintf(stderr,
                   "tidepool-replay: --device-limit: bad size \"%s\" (expected at least 2MiB, one page, with a "
                   "unit, e.g. 8GiB)\n",
                   device_limit.c_str());
      return 2;
    }
    target_options.device_memory = spec->bytes;
  }
  // A limit above the replay device's memory cannot be simulated: refused,
  // never clamped.
  std::uint64_t asked = target_options.device_memory;
  if (const auto limit = tidepool::runtime::parse_config(conf).device_limit;
      asked == 0 && limit && !limit->is_percent) {
    asked = limit->bytes;
  }
  if (asked > kReplayDeviceBytes) {
    std::fprintf(stderr, "tidepool-replay: device limit %s is above the replay device's memory (%s)\n",
                 tidepool::util::format_size(asked).c_str(), tidepool::util::format_size(kReplayDeviceBytes).c_str());
    return 2;
  }
  // Every output is opened before the work, so that one that cannot be
  // written fails now, with the reason.
  OutputFile html_file;
  OutputFile chrome_file;
  for (auto [path, file] : {std::pair{&html, &html_file}, std::pair{&chrome, &chrome_file}}) {
    std::string error;
    if (!path->empty() && !file->open(*path, &error)) {
      std::fprintf(stderr, "tidepool-replay: cannot write %s\n", error.c_str());
      return 1;
    }
  }
  std::vector<BaselineRun> baseline;
  if (!compare_path.empty()) {
    std::string error;
    if (!load_baseline(compare_path, &baseline, &error)) {
      std::fprintf(stderr, "tidepool-replay: --compare %s\n", error.c_str());
      return 2;
    }
  }
  RunReport run_report;
  if (!run_report_path.empty()) {
    std::string error;
    if (!load_run_report(run_report_path, &run_report, &error)) {
      std::fprintf(stderr, "tidepool-replay: --run-report %s\n", error.c_str());
      return 2;
    }
  }
  // Last: it is written as the replay goes.
  std::FILE* json_file = nullptr;
  if (!json_path.empty()) {
    json_file = std::fopen(json_path.c_str(), "w");
    if (json_file == nullptr) {
      std::fprintf(stderr, "tidepool-replay: cannot write %s: %s\n", json_path.c_str(), std::strerror(errno));
      return 1;
    }
  }

  ReplayOptions options;
  options.want_layout = !html.empty();
  options.record_allocations = !chrome.empty();
  options.progress = progress || isatty(STDERR_FILENO) != 0;
  options.step_count = step_count;
  options.lenient = lenient;
  options.run_count = traces.size() * policies.size();
  std::vector<Result> results;
  for (const auto& path : traces) {
    std::vector<TraceEvent> events;
    std::vector<std::string> owners;
    std::string error;
    std::string warning;
    if (!load_trace(path, &events, &error, &warning, &owners)) {
      std::fprintf(stderr, "tidepool-replay: %s\n", error.c_str());
      return 2;
    }
    if (!warning.empty()) std::fprintf(stderr, "tidepool-replay: %s\n", warning.c_str());
    const auto allocations = std::make_shared<const AllocationView>(view_allocations(events, owners));
    for (const auto& policy : policies) {
      Result result;
      if (!run_replay(path, events, policy, target_options, options, &result, &error)) {
        std::fprintf(stderr, "tidepool-replay: %s\n", error.c_str());
        return 2;
      }
      result.allocations = allocations;
      ++options.run_index;
      const std::string line = json_line(result);
      if (json) std::printf("%s\n", line.c_str());
      if (json_file != nullptr) std::fprintf(json_file, "%s\n", line.c_str());
      std::fflush(stdout);
      results.push_back(std::move(result));
    }
  }
  if (json_file != nullptr && std::fclose(json_file) != 0) {
    std::fprintf(stderr, "tidepool-replay: cannot write %s\n", json_path.c_str());
    return 1;
  }
  if (!json) std::printf("%s", table(results).c_str());
  const Comparison comparison = compare_runs(results, baseline, compare_path);
  // Under --json, stdout holds JSON lines only: the table goes to stderr.
  if (!compare_path.empty()) std::fputs(comparison_table(comparison).c_str(), json ? stderr : stdout);
  if (!run_report_path.empty()) std::fputs(run_report_lines(run_report, results).c_str(), json ? stderr : stdout);
  std::string error;
  if (html_file.is_open() &&
      !html_file.write_and_close(
          html_report(results, make_report_run(argc, argv, target_options, options),
                      compare_path.empty() ? nullptr : &comparison, run_report_path.empty() ? nullptr : &run_report),
          &error)) {
    std::fprintf(stderr, "tidepool-replay: cannot write %s\n", error.c_str());
    return 1;
  }
  if (chrome_file.is_open() && !chrome_file.write_and_close(chrome_trace(results, chrome_options), &error)) {
    std::fprintf(stderr, "tidepool-replay: cannot write %s\n", error.c_str());
    return 1;
  }
  return 0;
}
