// Child: one run of the user's program, as tidepool-advise runs each trial.
// Owns the process and everything it starts: the program runs in a process
// group of its own, so that the group (a training script's data-loader
// workers included) can be ended together; it is killed at its timeout, when
// the advisor is interrupted (SIGINT, SIGTERM, SIGHUP), and, should the
// advisor itself die, by the kernel (PR_SET_PDEATHSIG: the program itself;
// what it started then goes with it only if it watches its parent). The
// advisor is a child subreaper, so whatever the program leaves behind, in its
// group or out of it (setsid), comes back to the advisor, which kills and
// reaps it: when run_child() returns, nothing the trial started is left.
//
// The program's stdout and stderr are read through pipes, never shown: the
// tail of each is kept for messages, and lines matching the step marker are
// timed as they arrive.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <regex>
#include <string>
#include <vector>

namespace tidepool::advise {

struct ChildSpec {
  std::vector<std::string> argv;          // argv[0] is searched on PATH
  std::vector<std::string> environment;   // the whole environment, NAME=value
  double timeout_s = 0;                   // 0: none
  std::optional<std::regex> step_marker;  // lines of stdout or stderr to time
};

struct ChildResult {
  bool started = false;  // false: it could not be run (start_error says why)
  std::string start_error;
  bool timed_out = false;    // killed at the timeout
  bool interrupted = false;  // killed because the advisor was asked to stop
  int exit_code = -1;        // when it exited
  int signal = 0;            // when a signal ended it
  bool status_lost = false;  // reaped by someone else: SIGCHLD was ignored
  double wall_s = 0;
  std::string stdout_tail;  // the last kTailBytes of each
  std::string stderr_tail;
  std::vector<double> marker_s;  // seconds from start at which marker lines arrived
};

inline constexpr std::size_t kTailBytes = std::size_t{16} * 1024;

// Runs `spec` to its end. Never throws for anything the program does.
ChildResult run_child(const ChildSpec& spec);

// Signals that stop the advisor (SIGINT, SIGTERM, SIGHUP) end the running
// child's group instead of leaving it behind; after one arrives,
// interrupted() is true and run_child() refuses to start another. Also
// opens /dev/null on a closed descriptor 0, 1 or 2.
void install_interrupt_handlers();
bool interrupted() noexcept;
// The signal that interrupted the advisor, 0 if none.
int interrupt_signal() noexcept;

// The last `lines` lines of `text`.
std::string last_lines(const std::string& text, std::size_t lines);

}  // namespace tidepool::advise
