// See child.hpp.
#include "child.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>

namespace tidepool::advise {

namespace {

using Clock = std::chrono::steady_clock;

volatile std::sig_atomic_t g_interrupt_signal = 0;
int g_wake_fds[2] = {-1, -1};  // the handler writes a byte, so poll() wakes

void on_interrupt(int signal) {
  g_interrupt_signal = signal;
  if (g_wake_fds[1] >= 0) {
    const char byte = 1;
    const int saved = errno;
    (void)!::write(g_wake_fds[1], &byte, 1);
    errno = saved;
  }
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// One of the program's output streams: its tail, and its marker lines timed.
class OutputStream {
 public:
  OutputStream(int fd, const ChildSpec& spec, Clock::time_point start, std::vector<double>* marker_s)
      : fd_(fd), spec_(spec), start_(start), marker_s_(marker_s) {}

  [[nodiscard]] int fd() const noexcept { return fd_; }
  [[nodiscard]] bool open() const noexcept { return fd_ >= 0; }
  [[nodiscard]] const std::string& tail() const noexcept { return tail_; }

  // Reads what is there; closes at the end of the stream.
  void drain() {
    char buffer[8192];
    const ssize_t n = ::read(fd_, buffer, sizeof buffer);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) {
      finish();
      return;
    }
    append(std::string_view(buffer, static_cast<std::size_t>(n)));
  }

  void finish() {
    if (!line_.empty()) check_line();
    line_.clear();
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  void append(std::string_view data) {
    tail_.append(data);
    if (tail_.size() > 2 * kTailBytes) tail_.erase(0, tail_.size() - kTailBytes);
    if (!spec_.step_marker) return;
    for (const char c : data) {
      if (c == '\n') {
        check_line();
        line_.clear();
      } else if (line_.size() < 4096) {
        line_.push_back(c);
      }
    }
  }

  void check_line() {
    if (std::regex_search(line_, *spec_.step_marker)) marker_s_->push_back(seconds_since(start_));
  }

  int fd_;
  const ChildSpec& spec_;
  Clock::time_point start_;
  std::vector<double>* marker_s_;
  std::string tail_;
  std::string line_;
};

// Ends every process of the group: TERM, a grace period, then KILL.
void end_group(pid_t group, pid_t leader, int* status, bool* reaped) {
  ::kill(-group, SIGTERM);
  const auto deadline = Clock::now() + std::chrono::seconds(3);
  while (!*reaped && Clock::now() < deadline) {
    const pid_t r = ::waitpid(leader, status, WNOHANG);
    if (r == leader) *reaped = true;
    if (!*reaped) ::usleep(20 * 1000);
  }
  ::kill(-group, SIGKILL);
}

bool make_pipe(int fds[2]) { return ::pipe2(fds, O_CLOEXEC) == 0; }

}  // namespace

void install_interrupt_handlers() {
  if (g_wake_fds[0] < 0 && ::pipe2(g_wake_fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    g_wake_fds[0] = g_wake_fds[1] = -1;
  }
  struct sigaction action {};
  action.sa_handler = &on_interrupt;
  sigemptyset(&action.sa_mask);
  for (const int signal : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(signal, &action, nullptr);
}

bool interrupted() noexcept { return g_interrupt_signal != 0; }
int interrupt_signal() noexcept { return g_interrupt_signal; }

std::string last_lines(const std::string& text, std::size_t lines) {
  std::size_t end = text.size();
  while (end > 0 && text[end - 1] == '\n') --end;
  std::size_t begin = end;
  std::size_t seen = 0;
  while (begin > 0) {
    if (text[begin - 1] == '\n' && ++seen == lines) break;
    --begin;
  }
  return text.substr(begin, end - begin);
}

ChildResult run_child(const ChildSpec& spec) {
  ChildResult result;
  if (interrupted()) {
    result.start_error = "interrupted";
    result.interrupted = true;
    return result;
  }
  if (spec.argv.empty()) {
    result.start_error = "no program";
    return result;
  }
  int out_fds[2];
  int err_fds[2];
  int exec_fds[2];  // closed by a successful exec; carries errno otherwise
  if (!make_pipe(out_fds)) {
    result.start_error = std::string("pipe: ") + std::strerror(errno);
    return result;
  }
  if (!make_pipe(err_fds) || !make_pipe(exec_fds)) {
    result.start_error = std::string("pipe: ") + std::strerror(errno);
    ::close(out_fds[0]);
    ::close(out_fds[1]);
    return result;
  }
  std::vector<char*> argv;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : spec.environment) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();

  const auto start = Clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    // The child: only async-signal-safe calls from here to exec.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the advisor died before the line above
    struct sigaction action {};
    action.sa_handler = SIG_DFL;
    for (const int signal : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) ::sigaction(signal, &action, nullptr);
    const int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
    ::dup2(out_fds[1], STDOUT_FILENO);
    ::dup2(err_fds[1], STDERR_FILENO);
    ::execvpe(argv[0], argv.data(), envp.data());
    const int error = errno;
    (void)!::write(exec_fds[1], &error, sizeof error);
    ::_exit(127);
  }
  ::close(out_fds[1]);
  ::close(err_fds[1]);
  ::close(exec_fds[1]);
  if (pid < 0) {
    result.start_error = std::string("fork: ") + std::strerror(errno);
    ::close(out_fds[0]);
    ::close(err_fds[0]);
    ::close(exec_fds[0]);
    return result;
  }
  ::setpgid(pid, pid);  // also here, so the group exists before any kill below
  int exec_error = 0;
  ssize_t got = 0;
  do {
    got = ::read(exec_fds[0], &exec_error, sizeof exec_error);
  } while (got < 0 && errno == EINTR);
  ::close(exec_fds[0]);

  OutputStream out(out_fds[0], spec, start, &result.marker_s);
  OutputStream err(err_fds[0], spec, start, &result.marker_s);
  int status = 0;
  bool reaped = false;
  if (got == static_cast<ssize_t>(sizeof exec_error)) {
    result.start_error = "cannot run \"" + spec.argv[0] + "\": " + std::strerror(exec_error);
    out.finish();
    err.finish();
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return result;
  }
  result.started = true;

  // Until the program has exited and its output is read: the streams can
  // close before it exits, and a process it left behind can hold them open
  // after, so both are watched, the exit at least every 100 ms.
  const auto deadline = start + std::chrono::duration<double>(spec.timeout_s);
  Clock::time_point drain_until{};
  for (;;) {
    if (!reaped) {
      const pid_t r = ::waitpid(pid, &status, WNOHANG);
      if (r == pid || (r < 0 && errno == ECHILD)) {
        reaped = true;
        ::kill(-pid, SIGKILL);  // what it left in its group
        drain_until = Clock::now() + std::chrono::seconds(1);
      }
    }
    if (reaped && (!(out.open() || err.open()) || Clock::now() >= drain_until)) break;
    int wait_ms = 100;
    if (!reaped && spec.timeout_s > 0) {
      const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
      if (left <= 0) {
        result.timed_out = true;
        break;
      }
      wait_ms = static_cast<int>(std::min(left * 1000.0 + 1, 100.0));
    }
    pollfd fds[3] = {{out.fd(), POLLIN, 0}, {err.fd(), POLLIN, 0}, {g_wake_fds[0], POLLIN, 0}};
    const int ready = ::poll(fds, 3, wait_ms);  // a closed stream's fd is -1: poll skips it
    if (interrupted()) {
      result.interrupted = true;
      break;
    }
    if (ready <= 0) continue;  // the wait ran out, or EINTR
    if (out.open() && (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) out.drain();
    if (err.open() && (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) err.drain();
  }
  if (!reaped) end_group(pid, pid, &status, &reaped);
  // Whatever the program left running in its group goes with it.
  ::kill(-pid, SIGKILL);
  while (!reaped) {
    const pid_t r = ::waitpid(pid, &status, 0);
    if (r == pid || (r < 0 && errno != EINTR)) reaped = true;
  }
  out.finish();
  err.finish();
  result.wall_s = seconds_since(start);
  result.stdout_tail = out.tail();
  result.stderr_tail = err.tail();
  if (result.stdout_tail.size() > kTailBytes) result.stdout_tail.erase(0, result.stdout_tail.size() - kTailBytes);
  if (result.stderr_tail.size() > kTailBytes) result.stderr_tail.erase(0, result.stderr_tail.size() - kTailBytes);
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  return result;
}

}  // namespace tidepool::advise
