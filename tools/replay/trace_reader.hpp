// TraceReader: streams the events of an RMM CSV trace file, plain or gzip
// (zlib's gzread reads both, so one path serves .csv and .csv.gz). Errors
// carry the file and line number.
#pragma once

#include <memory>
#include <string>

#include "runtime/trace_format.hpp"
#include "util/status.hpp"

namespace tidepool::replay {

using runtime::TraceAction;
using runtime::TraceEvent;

class TraceReader {
 public:
  // Opens `path` (gzip-compressed when it ends in .gz) and reads the header.
  static util::Result<std::unique_ptr<TraceReader>> open(const std::string& path);
  ~TraceReader();
  TraceReader(const TraceReader&) = delete;
  TraceReader& operator=(const TraceReader&) = delete;

  // The next event: true with `event` set; false at the end or on an error,
  // which error() then reports with the line number.
  bool next(TraceEvent* event);
  [[nodiscard]] const std::string& error() const noexcept { return error_; }
  [[nodiscard]] bool failed() const noexcept { return !error_.empty(); }

 private:
  TraceReader() = default;
  bool read_line(std::string* line);

  void* gz_ = nullptr;  // gzFile; gzread handles plain files too
  std::string path_;
  std::string error_;
  std::uint64_t line_number_ = 0;
  std::string buffer_;
  std::size_t buffer_pos_ = 0;
  bool eof_ = false;
};

}  // namespace tidepool::replay
