// RunInfo: the report's `run` object, what identifies a run apart from its
// figures: the process (pid, argv, host), when tidepool started and when the
// report was written, and the configuration in effect.
//
// The start is taken when the Runtime is created (tidepool's first call in
// the process, not the process's own start), argv then too: a program that
// rewrites its command line later (setproctitle) does not change it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/config.hpp"

namespace tidepool::runtime {

struct RunInfo {
  std::int64_t pid = 0;
  std::vector<std::string> argv;  // /proc/self/cmdline, one element per argument
  std::string hostname;
  std::int64_t start_unix_ns = 0;  // wall clock, when the Runtime was created
  std::int64_t end_unix_ns = 0;    // wall clock, when the report was made
  std::int64_t start_steady_ns = 0;
  double duration_seconds = 0;         // from the steady clock: immune to wall-clock steps
  bool at_exit = false;                // the exit report, not a tidepool_report() on demand
  std::optional<std::string> conf;     // TIDEPOOL_CONF as given; none when unset or not from the environment
  Config config;                       // the configuration in effect, every option resolved
  std::string cuda_lib;                // the driver library tidepool opened (or tried to)
  std::uint64_t host_cache_bytes = 0;  // host_cache resolved: its default is a share of host memory
};

// What is known when the Runtime starts. `conf`: the raw TIDEPOOL_CONF.
RunInfo run_started(const Config& config, std::optional<std::string> conf);
// Sets the end time and the duration: the report is being made now.
void run_ended(RunInfo& run);

// The arguments of this process, as /proc/self/cmdline has them (empty when
// it cannot be read).
std::vector<std::string> read_cmdline();
// "2024-06-01T12:34:56.789Z".
std::string iso8601_utc(std::int64_t unix_ns);

}  // namespace tidepool::runtime
