// OutputFile: opened up front, written whole, gzipped for a .gz name (see
// the header).
#include "output_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "runtime/runtime.hpp"
#include "util/util.hpp"

namespace tidepool::replay {

OutputFile::~OutputFile() {
  if (fd_ < 0) return;
  ::close(fd_);
  if (created_) ::unlink(path_.c_str());
}

bool OutputFile::open(const std::string& path, std::string* error) {
  path_ = path;
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  created_ = fd_ >= 0;
  if (fd_ < 0 && errno == EEXIST) fd_ = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd_ < 0) {
    *error = path + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

bool OutputFile::write_and_close(std::string_view text, std::string* error) {
  // A .gz name: one gzip member, through the writer the runtime's traces use.
  // One deflate call: a report or trace is at most a few hundred MB, and
  // deflate's input counts are 32-bit.
  std::unique_ptr<runtime::GzipMembers> gzip;
  if (runtime::GzipMembers::wanted_for(path_)) {
    auto made = runtime::GzipMembers::create(text.size());
    if (text.size() > 0xffffffffU || !made) {
      *error = path_ + ": cannot compress " + std::to_string(text.size()) + " bytes";
      return false;
    }
    gzip = std::move(made.value());
  }
  const bool written =
      ::ftruncate(fd_, 0) == 0 && (gzip != nullptr ? gzip->write(fd_, text) : util::write_all(fd_, text));
  const int write_error = errno;
  const bool closed = ::close(fd_) == 0;
  fd_ = -1;
  if (!written || !closed) {
    *error = path_ + ": " + std::strerror(written ? errno : write_error);
    return false;
  }
  return true;
}

}  // namespace tidepool::replay
