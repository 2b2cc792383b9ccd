// OutputFile: opened up front, written whole, gzipped for a .gz name (see
// the header).
#include "output_file.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>

#include "util/util.hpp"

namespace tidepool::replay {

namespace {

// `text` as one gzip member; false when zlib fails (out of memory).
bool gzip(std::string_view text, std::string* out) {
  z_stream stream{};
  constexpr int kGzipWindow = 15 + 16;  // the largest window, with a gzip header and trailer
  if (deflateInit2(&stream, Z_DEFAULT_COMPRESSION, Z_DEFLATED, kGzipWindow, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    return false;
  }
  out->resize(deflateBound(&stream, static_cast<uLong>(text.size())) + 32);
  // zlib's interface is not const-correct; it never writes through next_in.
  stream.next_in =
      reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));  // NOLINT(cppcoreguidelines-pro-type-const-cast)
  stream.avail_in = static_cast<uInt>(text.size());
  stream.next_out = reinterpret_cast<Bytef*>(out->data());
  stream.avail_out = static_cast<uInt>(out->size());
  const int result = deflate(&stream, Z_FINISH);
  out->resize(stream.total_out);
  deflateEnd(&stream);
  return result == Z_STREAM_END;
}

}  // namespace

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
  std::string compressed;
  if (path_.ends_with(".gz")) {
    // One call: a report or trace is at most a few hundred MB, and
    // deflate's input counts are 32-bit.
    if (text.size() > 0xffffffffU || !gzip(text, &compressed)) {
      *error = path_ + ": cannot compress " + std::to_string(text.size()) + " bytes";
      return false;
    }
    text = compressed;
  }
  const bool written = ::ftruncate(fd_, 0) == 0 && util::write_all(fd_, text);
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
