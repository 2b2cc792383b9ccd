// The report's run metadata: reading the process's identity and the clocks.
#include "runtime/run_info.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <ctime>

#include "residency/residency.hpp"

namespace tidepool::runtime {

namespace {

std::int64_t now_ns(auto clock_now) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(clock_now.time_since_epoch()).count();
}

std::string host_name() {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return {};
  return name;
}

}  // namespace

std::vector<std::string> read_cmdline() {
  // Raw reads: the file's size is unknown until read, and stat says 0.
  const int fd = ::open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string bytes;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    bytes.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  // NUL-terminated arguments; the last NUL ends the last one.
  std::vector<std::string> argv;
  std::size_t start = 0;
  while (start < bytes.size()) {
    std::size_t end = bytes.find('\0', start);
    if (end == std::string::npos) end = bytes.size();
    argv.emplace_back(bytes, start, end - start);
    start = end + 1;
  }
  return argv;
}

std::string iso8601_utc(std::int64_t unix_ns) {
  const std::time_t seconds = static_cast<std::time_t>(unix_ns / 1'000'000'000);
  const int millis = static_cast<int>((unix_ns % 1'000'000'000) / 1'000'000);
  std::tm utc{};
  if (::gmtime_r(&seconds, &utc) == nullptr) return {};
  char text[40];
  const std::size_t n = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &utc);
  std::snprintf(text + n, sizeof text - n, ".%03dZ", millis);
  return text;
}

RunInfo run_started(const Config& config, std::optional<std::string> conf) {
  RunInfo run;
  run.pid = ::getpid();
  run.argv = read_cmdline();
  run.hostname = host_name();
  run.start_unix_ns = now_ns(std::chrono::system_clock::now());
  run.start_steady_ns = now_ns(std::chrono::steady_clock::now());
  run.conf = std::move(conf);
  run.config = config;
  run.cuda_lib = config.cuda_lib;
  run.host_cache_bytes = config.host_cache != 0 ? config.host_cache : residency::default_host_cache_bytes();
  return run;
}

void run_ended(RunInfo& run) {
  run.end_unix_ns = now_ns(std::chrono::system_clock::now());
  run.duration_seconds = static_cast<double>(now_ns(std::chrono::steady_clock::now()) - run.start_steady_ns) / 1e9;
}

}  // namespace tidepool::runtime
