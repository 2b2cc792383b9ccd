// tidepool-replay: replays allocation traces against tidepool's placement
// policies and baseline allocators, on the simulated driver, and reports
// utilization and fragmentation. Bad input exits 2 with file:line; a trace
// cut short in its last line is replayed up to it, with a warning.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>

#include "replay.hpp"
#include "reports.hpp"
#include "util/units.hpp"

using namespace tidepool::replay;  // NOLINT(google-build-using-namespace): a tool's main

namespace {

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  return static_cast<bool>(out);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Replay RMM-format allocation traces against tidepool's policies and baselines."};
  std::vector<std::string> policies;
  std::vector<std::string> traces;
  std::string device_memory;
  std::string conf;
  std::string html;
  std::string chrome;
  std::string frees = "stream";
  std::size_t step_count = 0;
  bool json = false;
  app.add_option("--policy", policies, "A policy or baseline (repeatable), or 'all'")
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--device-memory", device_memory, "A device budget, e.g. 8GiB");
  app.add_option("--conf", conf, "A TIDEPOOL_CONF string for tidepool's policies");
  app.add_option("--frees", frees,
                 "How tidepool's policies see the trace's frees: stream (cudaFreeAsync, the default) or device "
                 "(cudaFree/cuMemFree, as a preloaded cudaMalloc program makes them)")
      ->check(CLI::IsMember({"stream", "device"}));
  app.add_option("--steps", step_count, "Split the trace into N equal training steps (default: detect them)")
      ->check(CLI::Range(1, 1000000));
  app.add_flag("--json", json, "One JSON object per (trace, policy) line");
  app.add_option("--html", html, "Write a self-contained HTML report here");
  app.add_option("--chrome-trace", chrome, "Write Chrome trace-event counters here");
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
  (void)parse_free_mode(frees, &target_options.frees);  // checked by the parser
  if (!device_memory.empty()) {
    auto spec = tidepool::util::parse_size(device_memory);
    if (!spec || spec->is_percent || spec->bytes == 0) {
      std::fprintf(stderr, "tidepool-replay: --device-memory: bad size \"%s\"\n", device_memory.c_str());
      return 2;
    }
    target_options.device_memory = spec->bytes;
  }

  ReplayOptions options;
  options.want_layout = !html.empty();
  options.progress = isatty(STDERR_FILENO) != 0;
  options.step_count = step_count;
  std::vector<Result> results;
  for (const auto& path : traces) {
    std::vector<TraceEvent> events;
    std::string error;
    std::string warning;
    if (!load_trace(path, &events, &error, &warning)) {
      std::fprintf(stderr, "tidepool-replay: %s\n", error.c_str());
      return 2;
    }
    if (!warning.empty()) std::fprintf(stderr, "tidepool-replay: %s\n", warning.c_str());
    for (const auto& policy : policies) {
      Result result;
      if (!run_replay(path, events, policy, target_options, options, &result, &error)) {
        std::fprintf(stderr, "tidepool-replay: %s\n", error.c_str());
        return 2;
      }
      if (json) std::printf("%s\n", json_line(result).c_str());
      std::fflush(stdout);
      results.push_back(std::move(result));
    }
  }
  if (!json) std::printf("%s", table(results).c_str());
  if (!html.empty() && !write_file(html, html_report(results))) {
    std::fprintf(stderr, "tidepool-replay: cannot write %s\n", html.c_str());
    return 1;
  }
  if (!chrome.empty() && !write_file(chrome, chrome_trace(results))) {
    std::fprintf(stderr, "tidepool-replay: cannot write %s\n", chrome.c_str());
    return 1;
  }
  return 0;
}
