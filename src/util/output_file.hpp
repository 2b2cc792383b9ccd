// Output files: the one way tidepool opens a file it writes (the report, the
// trace, the log).
//
// tidepool runs inside someone else's process, with an environment that
// someone else may control, so every output is opened with the same care:
// - never through a symbolic link (O_NOFOLLOW on the last component);
// - only as a regular file. A FIFO, device, socket or directory is refused
//   before anything is written. The open is non-blocking, so a FIFO without
//   a reader cannot hang the host program at its first allocation;
// - never creating a directory;
// - truncated only once it is known to be a regular file.
// A file that is replaced whole (the report) is written to a temporary made
// with O_EXCL in the same directory and renamed over the target only when the
// target is absent or a regular file.
//
// Setuid and setgid programs get no file output driven by the environment at
// all: that is decided where the environment is read (secure_getenv).
#pragma once

#include <string>
#include <string_view>

#include "util/status.hpp"

namespace tidepool::util {

enum class OutputMode { truncate, append };

// A descriptor for writing `path` (O_CLOEXEC, blocking), or why not.
Result<int> open_output_file(const std::string& path, OutputMode mode);

// Writes all of `data` to `fd`, through short writes and EINTR; false (errno
// set) on an error.
bool write_all(int fd, std::string_view data) noexcept;

// Replaces `path` with `contents` atomically (readers see the old file or the
// new one, never a part).
Status replace_file(const std::string& path, std::string_view contents);

}  // namespace tidepool::util
