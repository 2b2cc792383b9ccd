// tidepool-advise [options] -- CMD ... {batch} ...
//
// How big a batch fits, and how fast: runs the user's own training program
// under the preload at several batch sizes ({batch} in the command), a few
// steps each, first without eviction (the largest batch that fits the
// budget) and then with eviction and learned prefetch (the largest that
// still trains), and names the batch with the most samples per second. Step
// time comes from the trace's repeating allocations, or from lines matching
// --step-marker. See search.hpp for the order of trials and trial.hpp for
// what one trial measures.
//
// Exit status: 0 with an answer; 1 when no batch of the range fits even
// with eviction; 2 for bad input or a trial that failed for a reason other
// than memory (its stderr tail is shown); 128+N when signal N stopped it.

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "advice.hpp"
#include "child.hpp"
#include "command.hpp"
#include "output_file.hpp"
#include "runtime/runtime.hpp"
#include "search.hpp"
#include "trial.hpp"
#include "util/util.hpp"

namespace {

using namespace tidepool::advise;

constexpr int kBadInput = 2;

int bad_input(const std::string& message) {
  std::fprintf(stderr, "tidepool-advise: %s\nRun tidepool-advise --help for the options.\n", message.c_str());
  return kBadInput;
}

class Usage : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App* /*app*/, std::string name) const override {
    return "Usage: " + name + " [OPTIONS] -- CMD [ARGS...]   (ARGS name {batch}, and may name {steps})\n";
  }
};

bool parse_range(const std::string& text, long* min, long* max) {
  const auto colon = text.find(':');
  if (colon == std::string::npos) return false;
  const auto number = [](const std::string& s, long* out) {
    if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 12) return false;
    *out = std::stol(s);
    return true;
  };
  return number(text.substr(0, colon), min) && number(text.substr(colon + 1), max);
}

// The keys tidepool-advise sets for every trial; the user's --conf may not.
bool names_our_key(const std::string& conf, std::string* key) {
  std::size_t start = 0;
  while (start <= conf.size()) {
    const auto end = std::min(conf.find(',', start), conf.size());
    std::string entry = conf.substr(start, end - start);
    entry = entry.substr(0, entry.find(':'));
    entry.erase(0, entry.find_first_not_of(" \t"));
    entry.erase(entry.find_last_not_of(" \t") + 1);
    for (const char* ours : {"device_limit", "evict", "prefetch", "report", "trace"}) {
      if (entry == ours) {
        *key = entry;
        return true;
      }
    }
    start = end + 1;
  }
  return false;
}

std::string mib_text(std::uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

void print_progress(const Trial& t) {
  std::string detail;
  if (t.outcome == Outcome::fits) {
    char text[160];
    std::snprintf(text, sizeof text, "peak reserved %s", mib_text(t.peak_reserved_bytes).c_str());
    detail = text;
    if (t.step_s > 0) {
      std::snprintf(text, sizeof text, ", %.1f ms/step, %.1f samples/s", t.step_s * 1e3, t.samples_per_s);
      detail += text;
    } else {
      detail += ", steps not timed";
    }
  } else {
    detail = t.reason;
  }
  std::fprintf(stderr, "tidepool-advise: trial %d: batch %ld, eviction %s: %s (%s)\n", t.index, t.batch,
               t.eviction ? "on" : "off", outcome_name(t.outcome), detail.c_str());
}

// The folder each trial writes to: --keep's, or a temporary one removed at the end.
class WorkDir {
 public:
  bool open(const std::string& keep, std::string* error) {
    if (!keep.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(keep, ec);
      if (ec || !std::filesystem::is_directory(keep)) {
        *error = "--keep " + keep + ": not a folder that can be made";
        return false;
      }
      path_ = keep;
      return true;
    }
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/tidepool-advise.XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      *error = "cannot make a temporary folder in " + pattern;
      return false;
    }
    path_ = pattern;
    temporary_ = true;
    return true;
  }
  ~WorkDir() {
    if (temporary_) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
    }
  }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
  bool temporary_ = false;
};

int advise(int argc, char** argv) {
  CLI::App app{
      "Finds the largest batch that fits a device budget, the largest that trains with eviction, and the batch "
      "with the most samples per second, by running CMD under the preload with {batch} replaced.",
      "tidepool-advise"};
  app.formatter(std::make_shared<Usage>());
  app.set_version_flag("--version", std::string("tidepool-advise ") + tidepool::util::version());
  std::string device_limit;
  std::string range = "1:1024";
  int steps = 6;
  double timeout_s = 600;
  double margin = 5;
  std::string marker;
  std::optional<long> base_batch;
  std::optional<double> base_lr;
  bool no_evict = false;
  std::string extra_conf;
  std::string json_path;
  std::string html_path;
  std::string keep;
  bool sim = false;
  std::string library = tidepool::util::installed_or_built("libtidepool.so", TIDEPOOL_BUILD_LIBRARY);
  std::string sim_library = tidepool::util::installed_or_built("tidepool/sim/libcuda.so.1", TIDEPOOL_BUILD_SIM_LIBRARY);
  app.add_option("--device-limit", device_limit,
                 "The device budget: bytes with a unit (20GiB) or a % of the device (default: the whole device)");
  app.add_option("--batch", range, "The batch sizes to search, MIN:MAX (default 1:1024)");
  app.add_option("--steps", steps, "What {steps} becomes: steps per trial; the step must repeat at least twice")
      ->check(CLI::Range(3, 1000000));
  app.add_option("--timeout", timeout_s, "Seconds a trial may run before it is killed (default 600)")
      ->check(CLI::Range(1.0, 1e6));
  app.add_option("--margin", margin,
                 "Percent of the budget kept free, for later steps that need more than the first (default 5)")
      ->check(CLI::Range(0.0, 90.0));
  app.add_option("--step-marker", marker,
                 "A regular expression matching a line the program prints once per step; steps are timed from "
                 "these lines instead of the trace");
  app.add_option("--base-batch", base_batch, "The batch size the learning rate below was tuned for")
      ->check(CLI::PositiveNumber);
  app.add_option("--base-lr", base_lr, "The learning rate at --base-batch, scaled to each answer")
      ->check(CLI::PositiveNumber);
  app.add_flag("--no-evict", no_evict, "Search without eviction only");
  app.add_option("--conf", extra_conf,
                 "More TIDEPOOL_CONF keys for every trial (not device_limit, evict, prefetch, report or trace)");
  app.add_option("--json", json_path, "Write the trials and the answer as JSON to this file");
  app.add_option("--html", html_path, "Write the answer and its plots as one HTML page to this file");
  app.add_option("--keep", keep, "Keep each trial's report, trace and output tails in this folder");
  app.add_flag("--sim", sim, "Run on tidepool's simulated driver (driver-API programs only)");
  app.add_option("--lib", library, "The libtidepool.so to preload (default: the one installed beside this tool)");
  app.prefix_command();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    return bad_input(e.what());
  }
  std::vector<std::string> words = app.remaining();
  if (!words.empty() && words.front() == "--") words.erase(words.begin());
  if (!words.empty() && words.front().starts_with("-")) return bad_input("unknown option \"" + words.front() + "\"");
  CommandTemplate command;
  std::string error;
  if (!CommandTemplate::parse(words, &command, &error)) return bad_input(error);

  long min_batch = 0;
  long max_batch = 0;
  if (!parse_range(range, &min_batch, &max_batch)) {
    return bad_input("--batch: expected MIN:MAX with whole numbers, not \"" + range + "\"");
  }
  if (min_batch < 1 || max_batch < min_batch) {
    return bad_input("--batch " + range + ": an empty range (MIN must be at least 1 and at most MAX)");
  }
  if (base_batch.has_value() != base_lr.has_value()) return bad_input("--base-batch and --base-lr go together");
  std::optional<std::regex> step_marker;
  if (!marker.empty()) {
    try {
      step_marker.emplace(marker, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      return bad_input("--step-marker: not a regular expression: " + std::string(e.what()));
    }
  }

  // What each trial's device_limit is: the budget less the margin.
  std::string trial_limit;
  std::uint64_t budget_bytes = 0;
  const double keep_share = 1.0 - margin / 100.0;
  if (device_limit.empty()) {
    trial_limit = std::to_string(100.0 * keep_share) + "%";
  } else {
    const auto spec = tidepool::util::parse_size(device_limit);
    if (!spec) return bad_input("--device-limit: not a size (20GiB) or a percentage (90%): \"" + device_limit + "\"");
    if (spec->is_percent) {
      trial_limit = std::to_string(spec->percent * keep_share) + "%";
    } else {
      budget_bytes = spec->bytes;
      const auto bytes = static_cast<std::uint64_t>(std::floor(static_cast<double>(spec->bytes) * keep_share));
      if (bytes < 2 * tidepool::util::MiB) {
        return bad_input("--device-limit " + device_limit +
                         " less the margin is under 2 MiB, tidepool's smallest budget");
      }
      trial_limit = std::to_string(bytes);
    }
  }
  std::string key;
  if (names_our_key(extra_conf, &key)) {
    return bad_input("--conf: \"" + key + "\" is set by tidepool-advise for each trial; use its own option");
  }
  TrialSettings settings;
  settings.command = command;
  settings.steps = steps;
  settings.timeout_s = timeout_s;
  settings.step_marker = step_marker;
  settings.device_limit = trial_limit;
  settings.extra_conf = extra_conf;
  settings.library = library;
  if (sim) {
    std::error_code ec;
    if (!std::filesystem::exists(sim_library, ec)) {
      return bad_input("--sim: the simulated driver is not at " + sim_library);
    }
    settings.sim_library = sim_library;
  }
  {
    std::error_code ec;
    if (!std::filesystem::exists(library, ec)) return bad_input("--lib: no library at " + library);
  }
  // Every output is checked before the first trial, not after the last.
  tidepool::replay::OutputFile json_file;
  tidepool::replay::OutputFile html_file;
  if (!json_path.empty() && !json_file.open(json_path, &error)) return bad_input("--json " + error);
  if (!html_path.empty() && !html_file.open(html_path, &error)) return bad_input("--html " + error);
  WorkDir work;
  if (!work.open(keep, &error)) return bad_input(error);
  settings.work_dir = work.path();
  // The whole configuration a trial gets, its report and trace paths
  // included: they go into TIDEPOOL_CONF, where a comma ends a value. (A
  // refusal here removes the outputs opened above and the temporary folder.)
  if (work.path().find(',') != std::string::npos) {
    return bad_input("the trials' folder " + work.path() +
                     " holds a comma, which TIDEPOOL_CONF cannot carry in a path: give --keep another folder");
  }
  if (const auto full =
          tidepool::runtime::parse_config(TrialRunner(settings).conf_for(true) + ",report:" + work.path() +
                                          "/trial-1.json,trace:" + work.path() + "/trial-1.csv");
      full.passthrough) {
    return bad_input("the configuration trials would get is refused: " + full.error);
  }

  install_interrupt_handlers();
  if (!command.names_steps()) {
    std::fprintf(stderr,
                 "tidepool-advise: the command names no {steps}: each trial runs as long as the program does "
                 "(keep it to a few steps; the step must repeat at least twice to be timed)\n");
  }
  TrialRunner runner(settings);
  SearchSettings search;
  search.min_batch = min_batch;
  search.max_batch = max_batch;
  search.eviction = !no_evict;
  const Answer answer = search_batches(search, [&](long batch, bool eviction) -> const Trial& {
    const Trial& t = runner.run(batch, eviction);
    print_progress(t);
    return t;
  });

  AdviceContext context;
  context.command = command.text();
  context.budget_text = device_limit;
  context.budget_bytes = budget_bytes;
  context.margin_percent = margin;
  context.min_batch = min_batch;
  context.max_batch = max_batch;
  context.steps = steps;
  context.steps_in_command = command.names_steps();
  context.step_marker = marker;
  context.base_batch = base_batch;
  context.base_lr = base_lr;
  context.sim = sim;
  for (const auto& t : runner.trials()) {
    if (!t.report_found || t.device_limit_bytes == 0) continue;
    context.trial_limit_bytes = t.device_limit_bytes;
    if (context.budget_bytes == 0) {
      context.budget_bytes = static_cast<std::uint64_t>(static_cast<double>(t.device_limit_bytes) / keep_share);
    }
    break;
  }
  const auto advice = advice_json(context, runner.trials(), answer);
  std::fputs(advice_table(advice).c_str(), stdout);
  std::fflush(stdout);
  if (json_file.is_open() &&
      !json_file.write_and_close(advice.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n", &error)) {
    std::fprintf(stderr, "tidepool-advise: --json %s\n", error.c_str());
    return 1;
  }
  if (html_file.is_open() && !html_file.write_and_close(advice_html(advice), &error)) {
    std::fprintf(stderr, "tidepool-advise: --html %s\n", error.c_str());
    return 1;
  }

  if (answer.interrupted || interrupted()) {
    std::fprintf(stderr, "tidepool-advise: interrupted; the trial in progress was stopped\n");
    return 128 + (interrupt_signal() != 0 ? interrupt_signal() : 2);
  }
  if (answer.stopped_by != nullptr) {
    const Trial& t = *answer.stopped_by;
    std::fprintf(stderr, "tidepool-advise: trial %d (batch %ld) failed: %s\n", t.index, t.batch, t.reason.c_str());
    if (!t.stderr_tail.empty()) std::fprintf(stderr, "its stderr ended with:\n%s\n", t.stderr_tail.c_str());
    return kBadInput;
  }
  if (answer.largest_without_eviction == 0 && answer.largest_with_eviction == 0) {
    std::fprintf(
        stderr, "tidepool-advise: no batch from %ld fits%s\n", min_batch,
        answer.eviction_searched ? ", even with eviction" : (" (eviction " + answer.eviction_note + ")").c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return advise(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tidepool-advise: %s\n", e.what());
    return 1;
  }
}
