// Reading trace files line by line through zlib.
#include "trace_reader.hpp"

#include <zlib.h>

namespace tidepool::replay {

util::Result<std::unique_ptr<TraceReader>> TraceReader::open(const std::string& path) {
  gzFile gz = gzopen(path.c_str(), "rb");
  if (gz == nullptr) return util::Status(util::Error::io_error, "cannot open the trace file");
  std::unique_ptr<TraceReader> reader(new TraceReader());
  reader->gz_ = gz;
  reader->path_ = path;
  std::string header;
  if (!reader->read_line(&header)) {
    return util::Status(util::Error::bad_input, "the trace is empty: no header line");
  }
  if (!header.empty() && header.back() == '\r') header.pop_back();
  if (header != runtime::kTraceHeader) {
    return util::Status(util::Error::bad_input, "the first line is not the header Thread,Time,Action,Pointer,Size,Stream");
  }
  return reader;
}

TraceReader::~TraceReader() {
  if (gz_ != nullptr) gzclose(static_cast<gzFile>(gz_));
}

bool TraceReader::read_line(std::string* line) {
  line->clear();
  for (;;) {
    if (buffer_pos_ >= buffer_.size()) {
      if (eof_) return !line->empty();
      buffer_.resize(1 << 16);
      const int n = gzread(static_cast<gzFile>(gz_), buffer_.data(), static_cast<unsigned>(buffer_.size()));
      if (n <= 0) {
        eof_ = true;
        buffer_.clear();
        buffer_pos_ = 0;
        if (n < 0) error_ = path_ + ": read error";
        return !line->empty();
      }
      buffer_.resize(static_cast<std::size_t>(n));
      buffer_pos_ = 0;
    }
    const std::size_t newline = buffer_.find('\n', buffer_pos_);
    if (newline == std::string::npos) {
      line->append(buffer_, buffer_pos_, std::string::npos);
      buffer_pos_ = buffer_.size();
      continue;
    }
    line->append(buffer_, buffer_pos_, newline - buffer_pos_);
    buffer_pos_ = newline + 1;
    ++line_number_;
    return true;
  }
}

bool TraceReader::next(TraceEvent* event) {
  std::string line;
  while (read_line(&line)) {
    if (line.empty() || line == "\r") continue;
    std::string detail;
    if (auto s = runtime::parse_trace_line(line, event, &detail); !s) {
      error_ = path_ + ":" + std::to_string(line_number_ + (eof_ ? 1 : 0)) + ": " + detail;
      return false;
    }
    event->line = line_number_ + (eof_ ? 1 : 0);
    return true;
  }
  return false;
}

}  // namespace tidepool::replay
