// GzipMembers: writes text to a file as a series of complete gzip members,
// one per write, for a trace whose name ends in .gz. zlib is opened with
// dlopen when the first such file is made, never linked: libtidepool.so
// needs only the C and C++ runtimes (tests/library), and a program that
// never asks for a compressed trace never loads zlib.
//
// Concatenated members are one gzip stream to every reader (zcat, Python's
// gzip, tidepool-replay), and each member ends whole, so a trace cut by a
// crash loses only the write in progress, as a plain trace does. Appending
// (a library reloaded in the same process) adds members to the same file.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "util/util.hpp"

namespace tidepool::runtime {

class GzipMembers {
 public:
  // Loads zlib and prepares for writes of up to `max_input` bytes; an error
  // (zlib missing) is io_error with the reason.
  static util::Result<std::unique_ptr<GzipMembers>> create(std::size_t max_input);
  ~GzipMembers();
  GzipMembers(const GzipMembers&) = delete;
  GzipMembers& operator=(const GzipMembers&) = delete;

  // Writes `data` (at most max_input bytes) to `fd` as one gzip member;
  // false with errno set when the write failed, or EIO when zlib did.
  bool write(int fd, std::string_view data) noexcept;

  // Whether `path` names a gzip file: it ends in ".gz".
  static bool wanted_for(const std::string& path) noexcept;

 private:
  struct Zlib;
  GzipMembers() = default;
  std::unique_ptr<Zlib> zlib_;
  std::unique_ptr<unsigned char[]> out_;
  std::size_t out_bytes_ = 0;
  std::size_t max_input_ = 0;
};

}  // namespace tidepool::runtime
