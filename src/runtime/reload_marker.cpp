// Reload marker (see the header): a memfd found again by its name in
// /proc/self/fd.
#include "runtime/reload_marker.hpp"

#include <dirent.h>
#include <sys/mman.h>
#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace tidepool::runtime {

namespace {

constexpr char kName[] = "tidepool-reload";
constexpr std::size_t kMaxRecord = 8192;

// The descriptor of the marker, or -1.
int find_marker() noexcept {
  DIR* fds = ::opendir("/proc/self/fd");
  if (fds == nullptr) return -1;
  int found = -1;
  const std::string_view expected = "/memfd:tidepool-reload";
  while (const dirent* entry = ::readdir(fds)) {
    int fd = -1;
    const char* end = entry->d_name + std::strlen(entry->d_name);
    if (std::from_chars(entry->d_name, end, fd).ptr != end || fd == ::dirfd(fds)) continue;
    char link[64];
    const std::string path = std::string("/proc/self/fd/") + entry->d_name;
    const ssize_t n = ::readlink(path.c_str(), link, sizeof(link));
    if (n > 0 && std::string_view(link, static_cast<std::size_t>(n)).starts_with(expected)) {
      found = fd;
      break;
    }
  }
  ::closedir(fds);
  return found;
}

}  // namespace

void leave_reload_marker(const TraceContinuation& trace) noexcept {
  try {
    const std::string record =
        std::to_string(::getpid()) + "\n" + std::to_string(trace.start_ns) + "\n" + trace.path + "\n";
    if (record.size() > kMaxRecord) return;
    if (const int stale = find_marker(); stale >= 0) ::close(stale);
    const int fd = ::memfd_create(kName, MFD_CLOEXEC);
    if (fd < 0) return;
    if (::pwrite(fd, record.data(), record.size(), 0) != static_cast<ssize_t>(record.size())) ::close(fd);
  } catch (...) {
    // No record: the next load starts a new trace.
  }
}

std::optional<TraceContinuation> take_reload_marker() noexcept {
  const int fd = find_marker();
  if (fd < 0) return std::nullopt;
  char buffer[kMaxRecord];
  const ssize_t n = ::pread(fd, buffer, sizeof(buffer), 0);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  try {
    const std::string_view text(buffer, static_cast<std::size_t>(n));
    const std::size_t first = text.find('\n');
    const std::size_t second = first == std::string_view::npos ? first : text.find('\n', first + 1);
    if (second == std::string_view::npos || text.back() != '\n') return std::nullopt;
    long pid = 0;
    TraceContinuation trace;
    if (std::from_chars(text.data(), text.data() + first, pid).ptr != text.data() + first || pid != ::getpid()) {
      return std::nullopt;  // a forked child's inherited copy: the trace is the parent's
    }
    const std::string_view start = text.substr(first + 1, second - first - 1);
    if (std::from_chars(start.data(), start.data() + start.size(), trace.start_ns).ptr != start.data() + start.size()) {
      return std::nullopt;
    }
    trace.path = std::string(text.substr(second + 1, text.size() - second - 2));
    return trace;
  } catch (...) {
    return std::nullopt;
  }
}

}  // namespace tidepool::runtime
