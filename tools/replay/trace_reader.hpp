// TraceReader: streams the events of an RMM CSV trace, from a file or from
// bytes in memory, plain or gzip (recognised by its magic bytes, whatever the
// name). It owns what a trace's bytes may be: every error carries the file
// and line number and quotes the offending text as printable ASCII, and no
// input, however malformed, makes it throw or read past its buffers.
//
// A trace cut short by a killed recorder ends in a partial line (and, when
// compressed, a gzip stream without its end): an unparsable last line with
// no newline after it is skipped and reported through warning(), not an
// error. A malformed line anywhere else is an error.
//
// For fuzzers: read_trace_buffer() takes any bytes and drives the whole
// reader, decompression included.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "runtime/runtime.hpp"
#include "util/util.hpp"

namespace tidepool::replay {

using runtime::TraceAction;
using runtime::TraceEvent;

// A line longer than this is not a trace line (they are under 200 bytes);
// the bound keeps binary junk without newlines from being gathered whole.
inline constexpr std::size_t kMaxTraceLineLength = 1024;

class TraceReader {
 public:
  // Opens `path` and reads the header. Fails only when the file cannot be
  // opened: an empty trace or a wrong header is an error() (with the text),
  // and next() then returns false.
  static util::Result<std::unique_ptr<TraceReader>> open(const std::string& path);
  // Reads `bytes` (not copied: they must outlive the reader); `name` stands
  // for the file in messages.
  static util::Result<std::unique_ptr<TraceReader>> from_buffer(std::string_view bytes, const std::string& name);
  ~TraceReader();
  TraceReader(const TraceReader&) = delete;
  TraceReader& operator=(const TraceReader&) = delete;

  // The next event: true with `event` set; false at the end or on an error,
  // which error() then reports with the line number.
  bool next(TraceEvent* event);
  [[nodiscard]] const std::string& error() const noexcept { return error_; }
  [[nodiscard]] bool failed() const noexcept { return !error_.empty(); }
  // Set at the end when the trace was cut short (one line, no newline).
  [[nodiscard]] const std::string& warning() const noexcept { return warning_; }
  // The Owner column's names so far: an event's `owner` indexes them, and
  // 0 is "" (a line without one, or a trace without the column).
  [[nodiscard]] const std::vector<std::string>& owners() const noexcept { return owners_; }

 private:
  TraceReader() = default;
  util::Status start();
  bool fill_raw();
  bool fill();
  enum class Line { complete, unterminated, none };
  Line read_line(std::string* line);
  void fail_at(std::uint64_t line, const std::string& what);
  std::uint32_t owner_index(std::string_view owner);
  static constexpr std::size_t kMaxOwners = 4096;

  std::string name_;
  std::FILE* file_ = nullptr;  // null when reading memory
  std::string_view memory_;    // what is left of the bytes in memory
  std::string raw_;            // raw bytes read from the file
  std::string_view raw_left_;  // unconsumed raw bytes (from raw_ or the memory)
  bool raw_end_ = false;       // no raw bytes after raw_left_
  void* zstream_ = nullptr;    // z_stream when the input is gzip
  bool gzip_member_done_ = false;
  bool cut_short_ = false;  // a gzip stream without its end
  std::string decoded_;     // plain text waiting to be split into lines
  std::size_t decoded_pos_ = 0;
  bool decoded_end_ = false;
  std::uint64_t line_number_ = 0;  // of the last line read
  bool has_owner_ = false;         // the header names the Owner column
  std::string error_;
  std::string warning_;
  std::vector<std::string> owners_{std::string()};
  // owner_index's lookups: raw Owner text to its index, the raw text of
  // each name's first line, and the index the last line named.
  std::unordered_map<std::string, std::uint32_t> owner_index_;
  std::vector<std::string> owner_keys_{std::string()};
  std::uint32_t last_owner_ = 0;
};

// Reads every event of `bytes` (a whole trace, plain or gzip) named `name`.
// False with `error` set (name:line: what) on malformed input; `warning`
// (may be null) receives the note about a cut-short last line. Never throws
// for bad input.
bool read_trace_buffer(std::string_view bytes, const std::string& name, std::vector<TraceEvent>* events,
                       std::string* error, std::string* warning, std::vector<std::string>* owners = nullptr);

}  // namespace tidepool::replay
