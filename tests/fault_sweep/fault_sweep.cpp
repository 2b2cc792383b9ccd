// The fault sweep: every driver entry point tidepool calls fails once, in
// turn, at each of its first K calls, each case in a fresh process of
// fault_workload (after fork the driver is unusable, so nothing is forked
// without an exec). A dry run per mode says which entry points tidepool calls
// and how often. Prints the table (mode, call, N, outcome), writes it to a
// file, and fails on any crash, hang, corruption, broken allocator or leak.
//
//   fault_sweep WORKLOAD TABLE_FILE [K] [JOBS] [TIMEOUT_S]
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

struct Case {
  std::string mode;
  std::string call;  // empty: the dry run
  unsigned nth = 0;
  // Filled in by the run.
  std::string outcome;
  std::string detail;
  std::string output;
  double seconds = 0;
  unsigned tool_failures = 0;  // runs lost to the sanitizer's own crash, retried
};

// LeakSanitizer's exit-time scan stops every thread with a ptrace tracer,
// which itself crashes now and then reading the thread-local storage of a
// thread that is exiting ("Tracer caught signal 11"): a failure of the
// tool, after the workload has given its verdict, not a finding. Such a
// run is repeated, up to kToolRetries times: on a loaded 2-core machine
// (CI, or a build beside the suite) three in a row have been seen to fail.
constexpr unsigned kToolRetries = 5;
bool sanitizer_tool_failure(const Case& c) {
  return c.outcome == "CRASH" && c.output.find("LeakSanitizer has encountered a fatal error") != std::string::npos;
}

struct Running {
  Case* c = nullptr;
  pid_t pid = -1;
  std::string log;
  Clock::time_point started;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// "key=value" from the RESULT line.
std::string field(const std::string& result_line, const std::string& key) {
  const std::string needle = " " + key + "=";
  const std::size_t at = result_line.find(needle);
  if (at == std::string::npos) return {};
  const std::size_t begin = at + needle.size();
  return result_line.substr(begin, result_line.find(' ', begin) - begin);
}

std::string result_line(const std::string& output) {
  const std::size_t at = output.rfind("RESULT ");
  if (at == std::string::npos) return {};
  return output.substr(at, output.find('\n', at) - at);
}

std::string tail(const std::string& text, std::size_t lines) {
  std::size_t at = text.size();
  while (lines-- > 0 && at > 0) {
    const std::size_t nl = text.rfind('\n', at - 1);
    if (nl == std::string::npos) return text;
    at = nl;
  }
  return text.substr(at);
}

bool start(Running& r, const std::string& workload, const std::string& scratch, int index) {
  r.log = scratch + "/case" + std::to_string(index) + ".log";
  std::vector<std::string> args = {workload, r.c->mode};
  if (!r.c->call.empty()) {
    args.push_back(r.c->call);
    args.push_back(std::to_string(r.c->nth));
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, r.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  const int rc = posix_spawn(&r.pid, workload.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  r.started = Clock::now();
  if (rc != 0) {
    r.c->outcome = "CRASH";
    r.c->detail = std::string("cannot spawn: ") + std::strerror(rc);
    return false;
  }
  return true;
}

void classify(Case& c, int status, bool timed_out) {
  const std::string line = result_line(c.output);
  if (timed_out) {
    c.outcome = "HANG";
    c.detail = "killed after the timeout";
  } else if (WIFSIGNALED(status)) {
    c.outcome = "CRASH";
    c.detail = std::string("signal ") + strsignal(WTERMSIG(status));
  } else if (WEXITSTATUS(status) == 3) {
    c.outcome = "CORRUPT";
    c.detail = field(line, "detail");
  } else if (WEXITSTATUS(status) == 4) {
    c.outcome = "BROKEN";
    c.detail = field(line, "detail");
  } else if (WEXITSTATUS(status) == 5) {
    c.outcome = "LEAK";
    c.detail = field(line, "detail");
  } else if (WEXITSTATUS(status) != 0 || line.empty()) {
    // A sanitizer's report exits non-zero without a RESULT line.
    c.outcome = "CRASH";
    c.detail = "exit " + std::to_string(WEXITSTATUS(status));
  } else if (field(line, "reached") != "1") {
    c.outcome = "not reached";
  } else if (field(line, "errors") != "0") {
    c.outcome = "error returned";
    c.detail = field(line, "first_error") + " (" + field(line, "errors") + " calls)";
  } else {
    c.outcome = "no effect/retried";
  }
}

// Runs every case, `jobs` at a time, each with a wall-clock limit.
void run_all(std::vector<Case*>& cases, const std::string& workload, const std::string& scratch, unsigned jobs,
             double timeout_s) {
  std::vector<Running> running;
  std::size_t next = 0;
  int index = 0;
  while (next < cases.size() || !running.empty()) {
    while (running.size() < jobs && next < cases.size()) {
      Running r;
      r.c = cases[next++];
      if (start(r, workload, scratch, index++)) running.push_back(r);
    }
    bool any = false;
    for (std::size_t i = 0; i < running.size();) {
      Running& r = running[i];
      int status = 0;
      const pid_t done = ::waitpid(r.pid, &status, WNOHANG);
      const double elapsed = std::chrono::duration<double>(Clock::now() - r.started).count();
      const bool timed_out = done == 0 && elapsed > timeout_s;
      if (timed_out) {
        ::kill(r.pid, SIGKILL);
        ::waitpid(r.pid, &status, 0);
      }
      if (done == r.pid || timed_out) {
        r.c->seconds = elapsed;
        r.c->output = read_file(r.log);
        ::unlink(r.log.c_str());
        classify(*r.c, status, timed_out);
        if (sanitizer_tool_failure(*r.c) && r.c->tool_failures < kToolRetries) {
          r.c->tool_failures++;
          cases.push_back(r.c);  // run again later
        }
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
        any = true;
      } else {
        ++i;
      }
    }
    if (!any) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

bool failing(const std::string& outcome) {
  return outcome == "CRASH" || outcome == "HANG" || outcome == "CORRUPT" || outcome == "BROKEN" || outcome == "LEAK";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s WORKLOAD TABLE_FILE [K] [JOBS] [TIMEOUT_S]\n", argv[0]);
    return 2;
  }
  const std::string workload = argv[1];
  const std::string table_path = argv[2];
  const unsigned k = argc > 3 ? static_cast<unsigned>(std::atoi(argv[3])) : 3;
  const unsigned jobs = argc > 4 ? std::max(1, std::atoi(argv[4])) : 2;
  const double timeout_s = argc > 5 ? std::atof(argv[5]) : 20;
  const std::string scratch = table_path + ".cases";
  ::mkdir(scratch.c_str(), 0755);
  const auto began = Clock::now();

  // The dry runs: which entry points tidepool calls, and how often.
  const std::vector<std::string> modes = {"pool", "evict"};
  std::vector<Case> dry(modes.size());
  std::vector<Case*> dry_cases;
  for (std::size_t m = 0; m < modes.size(); ++m) {
    dry[m].mode = modes[m];
    dry_cases.push_back(&dry[m]);
  }
  run_all(dry_cases, workload, scratch, jobs, timeout_s);
  std::vector<Case> cases;
  bool dry_ok = true;
  for (Case& d : dry) {
    const std::string line = result_line(d.output);
    // Without a fault every call must succeed, and the evict mode must evict.
    const bool clean = d.outcome == "not reached" && field(line, "errors") == "0" &&
                       (d.mode != "evict" || field(line, "evicted") == "1");
    if (!clean) {
      std::printf("dry run (%s) is not clean: %s %s\n%s\n", d.mode.c_str(), d.outcome.c_str(), d.detail.c_str(),
                  tail(d.output, 20).c_str());
      dry_ok = false;
      continue;
    }
    std::istringstream lines(d.output);
    std::string word;
    std::string name;
    unsigned long long total = 0;
    unsigned long long own = 0;
    std::string text;
    while (std::getline(lines, text)) {
      std::istringstream row(text);
      if (!(row >> word >> name >> total >> own) || word != "COUNT" || total <= own) continue;
      for (unsigned n = 1; n <= std::min<unsigned long long>(total - own, k); ++n) {
        Case c;
        c.mode = d.mode;
        c.call = name;
        c.nth = n;
        cases.push_back(c);
      }
    }
  }
  if (!dry_ok) return 1;

  std::vector<Case*> pending;
  for (Case& c : cases) pending.push_back(&c);
  run_all(pending, workload, scratch, jobs, timeout_s);
  ::rmdir(scratch.c_str());
  const double seconds = std::chrono::duration<double>(Clock::now() - began).count();

  std::ostringstream table;
  std::map<std::string, unsigned> counts;
  char row[512];
  std::snprintf(row, sizeof row, "%-6s %-32s %2s  %-18s %s\n", "mode", "call", "N", "outcome", "detail");
  table << row;
  for (const Case& c : cases) {
    std::snprintf(row, sizeof row, "%-6s %-32s %2u  %-18s %s\n", c.mode.c_str(), c.call.c_str(), c.nth,
                  c.outcome.c_str(), c.detail.c_str());
    table << row;
    ++counts[c.outcome];
  }
  table << "\n" << cases.size() << " cases in " << static_cast<int>(seconds) << " s:";
  for (const auto& [outcome, n] : counts) table << " " << outcome << " " << n << ";";
  table << "\n";
  bool ok = true;
  for (const Case& c : cases) {
    if (!failing(c.outcome)) continue;
    ok = false;
    table << "\n--- " << c.mode << " " << c.call << " " << c.nth << ": " << c.outcome << "\n" << tail(c.output, 25);
  }
  std::fputs(table.str().c_str(), stdout);
  std::ofstream(table_path) << table.str();
  return ok ? 0 : 1;
}
