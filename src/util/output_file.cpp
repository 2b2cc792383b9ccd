// Output files (see the header): every check happens on the descriptor that
// is then written, so a path swapped between check and write gains nothing.
#include "util/output_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tidepool::util {

bool write_all(int fd, std::string_view data) noexcept {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

namespace {

const char* not_regular_reason(mode_t mode) {
  if (S_ISDIR(mode)) return "is a directory, not a regular file";
  if (S_ISFIFO(mode)) return "is a FIFO, not a regular file";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "is a device, not a regular file";
  if (S_ISSOCK(mode)) return "is a socket, not a regular file";
  return "is not a regular file";
}

Status open_error(int error) {
  // O_NOFOLLOW reports a link as ELOOP; O_NONBLOCK, a FIFO without a reader as ENXIO.
  if (error == ELOOP) return {Error::io_error, "is a symbolic link; tidepool never writes through one"};
  if (error == ENXIO) return {Error::io_error, "is a FIFO or device without a reader, not a regular file"};
  if (error == ENOENT) return {Error::io_error, "its directory does not exist (tidepool creates none)"};
  if (error == EISDIR) return {Error::io_error, "is a directory, not a regular file"};
  return {Error::io_error, std::strerror(error)};
}

}  // namespace

Result<int> open_output_file(const std::string& path, OutputMode mode) {
  if (path.empty()) return Status(Error::invalid_value, "no path given");
  // Refuse what is not a regular file before opening it: opening some devices
  // has effects of its own. The fstat below catches a swap after this check.
  struct stat before {};
  if (::lstat(path.c_str(), &before) == 0) {
    if (S_ISLNK(before.st_mode))
      return Status(Error::io_error, "is a symbolic link; tidepool never writes through one");
    if (!S_ISREG(before.st_mode)) return Status(Error::io_error, not_regular_reason(before.st_mode));
  }
  int flags = O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY;
  if (mode == OutputMode::append) flags |= O_APPEND;
  const int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) return open_error(errno);
  struct stat opened {};
  if (::fstat(fd, &opened) != 0) {
    const int error = errno;
    ::close(fd);
    return open_error(error);
  }
  if (!S_ISREG(opened.st_mode)) {
    ::close(fd);
    return Status(Error::io_error, not_regular_reason(opened.st_mode));
  }
  if ((mode == OutputMode::truncate && ::ftruncate(fd, 0) != 0) ||
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
    const int error = errno;
    ::close(fd);
    return open_error(error);
  }
  return fd;
}

Status replace_file(const std::string& path, std::string_view contents) {
  if (path.empty()) return {Error::invalid_value, "no path given"};
  struct stat existing {};
  if (::lstat(path.c_str(), &existing) == 0) {
    if (S_ISLNK(existing.st_mode)) return {Error::io_error, "is a symbolic link; tidepool never writes through one"};
    if (!S_ISREG(existing.st_mode)) return {Error::io_error, not_regular_reason(existing.st_mode)};
  }
  // mkostemp opens with O_CREAT|O_EXCL: a planted file or link at the
  // temporary's name makes it pick another name, never write through it.
  std::string temporary = path + ".tmp.XXXXXX";
  const int fd = ::mkostemp(temporary.data(), O_CLOEXEC);
  if (fd < 0) return open_error(errno);
  // mkostemp makes the file 0600; a report is as readable as any output file.
  const bool written = ::fchmod(fd, 0644) == 0 && write_all(fd, contents);
  const int write_error = errno;
  const bool closed = ::close(fd) == 0;
  if (!written || !closed) {
    ::unlink(temporary.c_str());
    return open_error(written ? EIO : write_error);
  }
  // Checked again just before the rename, which would replace whatever is there.
  if (::lstat(path.c_str(), &existing) == 0 && !S_ISREG(existing.st_mode)) {
    ::unlink(temporary.c_str());
    return {Error::io_error, S_ISLNK(existing.st_mode) ? "is a symbolic link; tidepool never writes through one"
                                                       : not_regular_reason(existing.st_mode)};
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    return open_error(error);
  }
  return Status::success();
}

}  // namespace tidepool::util
