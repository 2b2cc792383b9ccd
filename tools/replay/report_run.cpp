// make_report_run: the metadata the HTML report shows, taken from this process
// (version, argv, the UTC date, the host) and from the replay's options.
#include "report_run.hpp"

#include <unistd.h>

#include <cstdio>
#include <ctime>

#include "util/util.hpp"

namespace tidepool::replay {

namespace {

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  if (gmtime_r(&now, &tm) == nullptr) return "";
  char text[32];
  return std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0 ? "" : text;
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "";
  return name;
}

// Bytes as the --device-limit option reads them back.
std::string size_text(std::uint64_t bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (unit < 4 && bytes % 1024 == 0 && bytes >= 1024) {
    bytes /= 1024;
    ++unit;
  }
  return std::to_string(bytes) + units[unit];
}

}  // namespace

ReportRun make_report_run(int argc, const char* const* argv, const TargetOptions& target, const ReplayOptions& replay) {
  ReportRun run;
  run.version = util::version();
  for (int i = 0; i < argc; ++i) run.argv.emplace_back(argv[i] == nullptr ? "" : argv[i]);
  run.date = utc_now();
  run.host = host_name();
  run.options.emplace_back("frees", free_mode_name(target.frees));
  if (target.lag_us > 0) {
    char lag[192];
    if (target.host_us >= 0) {
      std::snprintf(lag, sizeof lag,
                    "%g us of work queued per allocation (tidepool's policies), the host taking %g us per event on "
                    "the sim's virtual clock",
                    target.lag_us, target.host_us);
    } else {
      std::snprintf(lag, sizeof lag, "%g us of work queued per allocation (tidepool's policies), in wall time",
                    target.lag_us);
    }
    run.options.emplace_back("device lag", lag);
  }
  bool given = false;
  const std::uint64_t limit = device_limit_of(target, &given);
  run.options.emplace_back("device limit",
                           given ? size_text(limit) : size_text(limit) + " (the replay device's memory), every target");
  run.options.emplace_back("conf", target.conf.empty() ? "(none)" : target.conf);
  run.options.emplace_back("steps", replay.step_count == 0 ? "detected" : std::to_string(replay.step_count) + " equal");
  if (replay.lenient) run.options.emplace_back("lenient", "frees of unknown pointers skipped");
  return run;
}

}  // namespace tidepool::replay
