// See child.hpp.
#include "child.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
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

bool make_pipe(int fds[2]) { return ::pipe2(fds, O_CLOEXEC) == 0; }

void close_fd(int* fd) {
  if (*fd >= 0) ::close(*fd);
  *fd = -1;
}

// True once the leader has exited; it stays a zombie, so its pid, which is
// also the group's id, cannot be reused before reap() below.
bool leader_exited(pid_t leader) {
  siginfo_t info{};
  if (::waitid(P_PID, static_cast<id_t>(leader), &info, WEXITED | WNOHANG | WNOWAIT) != 0) return errno == ECHILD;
  return info.si_pid == leader;
}

// Reaps the leader; false when its status is lost (SIGCHLD ignored by
// whoever started the advisor: the kernel reaped it).
bool reap(pid_t leader, int* status) {
  for (;;) {
    if (::waitpid(leader, status, 0) == leader) return true;
    if (errno != EINTR) return false;
  }
}

// The pids of this process's children: the trial's leader, and, since the
// advisor is a subreaper, whatever the trial left behind that outlived its
// parent, in its group or out of it (setsid).
std::vector<pid_t> children() {
  std::vector<pid_t> pids;
  DIR* tasks = ::opendir("/proc/self/task");
  if (tasks == nullptr) return pids;
  while (const dirent* task = ::readdir(tasks)) {
    if (task->d_name[0] == '.') continue;
    std::FILE* f = std::fopen((std::string("/proc/self/task/") + task->d_name + "/children").c_str(), "r");
    if (f == nullptr) continue;
    long pid = 0;
    while (std::fscanf(f, "%ld", &pid) == 1) pids.push_back(static_cast<pid_t>(pid));
    std::fclose(f);
  }
  ::closedir(tasks);
  return pids;
}

// Kills and reaps every remaining child (see children()), until none is
// left: a killed child's own children come to the advisor in turn. Waiting
// for them matters: a dying process may still hold device memory that the
// next trial needs.
void end_leftovers() {
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  for (std::vector<pid_t> left = children(); !left.empty() && Clock::now() < deadline; left = children()) {
    for (const pid_t pid : left) ::kill(pid, SIGKILL);  // each unreaped, so each pid is still its own
    for (const pid_t pid : left) {
      while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
  }
}

void prepare_once() {
  static bool prepared = false;
  if (prepared) return;
  prepared = true;
  // Exit statuses are ours to read, and orphans of a trial come to us.
  struct sigaction action {};
  action.sa_handler = SIG_DFL;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGCHLD, &action, nullptr);
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
}

}  // namespace

void install_interrupt_handlers() {
  prepare_once();
  // A descriptor 0, 1 or 2 that is closed would be reused by a pipe below,
  // and the child's dup2 onto it would go wrong.
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0) (void)::open("/dev/null", O_RDWR);
  }
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
  prepare_once();
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
  int out_fds[2] = {-1, -1};
  int err_fds[2] = {-1, -1};
  int exec_fds[2] = {-1, -1};  // closed by a successful exec; carries errno otherwise
  const auto close_all = [&] {
    for (int* fds : {out_fds, err_fds, exec_fds}) {
      close_fd(&fds[0]);
      close_fd(&fds[1]);
    }
  };
  if (!make_pipe(out_fds) || !make_pipe(err_fds) || !make_pipe(exec_fds)) {
    result.start_error = std::string("pipe: ") + std::strerror(errno);
    close_all();
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
    const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
    ::dup2(out_fds[1], STDOUT_FILENO);
    ::dup2(err_fds[1], STDERR_FILENO);
    ::execvpe(argv[0], argv.data(), envp.data());
    const int error = errno;
    (void)!::write(exec_fds[1], &error, sizeof error);
    ::_exit(127);
  }
  close_fd(&out_fds[1]);
  close_fd(&err_fds[1]);
  close_fd(&exec_fds[1]);
  if (pid < 0) {
    result.start_error = std::string("fork: ") + std::strerror(errno);
    close_all();
    return result;
  }
  ::setpgid(pid, pid);  // also here, so the group exists before any kill below
  int exec_error = 0;
  ssize_t got = 0;
  do {
    got = ::read(exec_fds[0], &exec_error, sizeof exec_error);
  } while (got < 0 && errno == EINTR);
  close_fd(&exec_fds[0]);

  OutputStream out(out_fds[0], spec, start, &result.marker_s);
  OutputStream err(err_fds[0], spec, start, &result.marker_s);
  out_fds[0] = err_fds[0] = -1;  // the streams own them now
  int status = 0;
  if (got == static_cast<ssize_t>(sizeof exec_error)) {
    result.start_error = "cannot run \"" + spec.argv[0] + "\": " + std::strerror(exec_error);
    out.finish();
    err.finish();
    (void)reap(pid, &status);
    return result;
  }
  result.started = true;

  // Reads the program's output for up to `wait_ms`; false once both streams are closed.
  const auto read_output = [&](int wait_ms) {
    if (!out.open() && !err.open()) {
      if (wait_ms > 0) ::usleep(static_cast<useconds_t>(wait_ms) * 1000);
      return false;
    }
    pollfd fds[3] = {{out.fd(), POLLIN, 0}, {err.fd(), POLLIN, 0}, {g_wake_fds[0], POLLIN, 0}};
    if (::poll(fds, 3, wait_ms) > 0) {  // a closed stream's fd is -1: poll skips it
      if (out.open() && (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) out.drain();
      if (err.open() && (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) err.drain();
    }
    return true;
  };

  // Until the program has exited: its output is read meanwhile, so it never
  // blocks on a full pipe, and its exit is looked for at least every 100 ms
  // (the streams can close before it exits, or stay open after it, held by
  // something it started).
  const auto deadline = start + std::chrono::duration<double>(spec.timeout_s);
  bool exited = false;
  while (!(exited = leader_exited(pid))) {
    int wait_ms = 100;
    if (spec.timeout_s > 0) {
      const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
      if (left <= 0) {
        result.timed_out = true;
        break;
      }
      wait_ms = static_cast<int>(std::min(left * 1000.0 + 1, 100.0));
    }
    read_output(wait_ms);
    if (interrupted()) {
      result.interrupted = true;
      break;
    }
  }
  if (!exited) {
    // TERM to the whole group, a grace period (still reading, so that what
    // it prints on its way out cannot block it), then KILL.
    ::kill(-pid, SIGTERM);
    const auto grace = Clock::now() + std::chrono::seconds(3);
    while (!leader_exited(pid) && Clock::now() < grace) read_output(20);
  }
  ::kill(-pid, SIGKILL);  // the rest of its group; the unreaped leader keeps the group's id ours
  const bool status_known = reap(pid, &status);
  const auto drain_until = Clock::now() + std::chrono::seconds(1);
  while (Clock::now() < drain_until && read_output(20)) {
  }
  end_leftovers();
  out.finish();
  err.finish();
  result.wall_s = seconds_since(start);
  result.stdout_tail = out.tail();
  result.stderr_tail = err.tail();
  if (result.stdout_tail.size() > kTailBytes) result.stdout_tail.erase(0, result.stdout_tail.size() - kTailBytes);
  if (result.stderr_tail.size() > kTailBytes) result.stderr_tail.erase(0, result.stderr_tail.size() - kTailBytes);
  if (!status_known) {
    result.status_lost = true;
  } else if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
  }
  return result;
}

}  // namespace tidepool::advise
