// Reading traces: raw bytes (a file read in chunks, or memory), inflated
// when they are gzip, split into bounded lines, parsed one by one. One path
// serves files and buffers so that what a fuzzer reaches is what the tool
// runs.
#include "trace_reader.hpp"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace tidepool::replay {

namespace {

constexpr std::size_t kChunk = std::size_t{1} << 16;

bool gzip_magic(std::string_view bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
         static_cast<unsigned char>(bytes[1]) == 0x8b;
}

}  // namespace

util::Result<std::unique_ptr<TraceReader>> TraceReader::open(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) return util::Status(util::Error::io_error, "cannot open the trace file");
  std::unique_ptr<TraceReader> reader(new TraceReader());
  reader->file_ = file;
  reader->name_ = path;
  if (auto s = reader->start(); !s) return s;
  return reader;
}

util::Result<std::unique_ptr<TraceReader>> TraceReader::from_buffer(std::string_view bytes, const std::string& name) {
  std::unique_ptr<TraceReader> reader(new TraceReader());
  reader->memory_ = bytes;
  reader->name_ = name;
  if (auto s = reader->start(); !s) return s;
  return reader;
}

TraceReader::~TraceReader() {
  if (file_ != nullptr) std::fclose(file_);
  if (zstream_ != nullptr) {
    auto* z = static_cast<z_stream*>(zstream_);
    inflateEnd(z);
    delete z;
  }
}

void TraceReader::fail_at(std::uint64_t line, const std::string& what) {
  if (error_.empty()) error_ = name_ + ":" + std::to_string(line) + ": " + what;
}

// A header that is missing or wrong is reported by error() (with its text),
// not by open(): a Status carries only a static message.
util::Status TraceReader::start() {
  if (file_ == nullptr) {
    raw_left_ = memory_;
    raw_end_ = true;
  }
  // Two bytes decide gzip or plain; a file may hand them out one at a time.
  while (raw_left_.size() < 2 && fill_raw()) {
  }
  if (failed()) return util::Status::success();
  if (gzip_magic(raw_left_)) {
    auto* z = new z_stream{};
    if (inflateInit2(z, 16 + MAX_WBITS) != Z_OK) {
      delete z;
      return util::Status(util::Error::out_of_memory, "cannot start zlib");
    }
    zstream_ = z;
  }
  std::string header;
  const Line kind = read_line(&header);
  if (failed()) return util::Status::success();
  if (kind == Line::none) {
    fail_at(1, "the trace is empty: no header line");
    return util::Status::success();
  }
  if (!header.empty() && header.back() == '\r') header.pop_back();
  has_owner_ = header == runtime::kTraceHeader;
  if (!has_owner_ && header != runtime::kRmmTraceHeader) {
    fail_at(1, "the first line is not the header Thread,Time,Action,Pointer,Size,Stream (with ,Owner or without): \"" +
                   runtime::printable(header) + "\"");
  }
  return util::Status::success();
}

// More raw bytes after the unconsumed ones; false at the end or on an error.
bool TraceReader::fill_raw() {
  if (raw_end_) return false;
  std::string next(raw_left_);
  const std::size_t kept = next.size();
  next.resize(kept + kChunk);
  const std::size_t n = std::fread(next.data() + kept, 1, kChunk, file_);
  next.resize(kept + n);
  if (n == 0) {
    raw_end_ = true;
    if (std::ferror(file_) != 0) fail_at(line_number_ + 1, std::string("read error: ") + std::strerror(errno));
    return false;
  }
  raw_ = std::move(next);
  raw_left_ = raw_;
  return true;
}

// More plain text into decoded_; false once there is none (the end, or an
// error, which error() then holds).
bool TraceReader::fill() {
  if (decoded_end_ || failed()) return false;
  decoded_.clear();
  decoded_pos_ = 0;
  if (zstream_ == nullptr) {
    if (raw_left_.empty() && !fill_raw()) {
      decoded_end_ = true;
      return false;
    }
    decoded_.assign(raw_left_);
    raw_left_ = {};
    return true;
  }
  auto* z = static_cast<z_stream*>(zstream_);
  decoded_.resize(kChunk);
  for (;;) {
    if (gzip_member_done_) {
      // After a member: the end, another member (gzip allows several), or junk.
      while (raw_left_.size() < 2 && fill_raw()) {
      }
      if (failed()) return false;
      if (raw_left_.empty()) break;
      if (!gzip_magic(raw_left_)) {
        fail_at(line_number_ + 1, "data after the end of the gzip stream");
        return false;
      }
      inflateReset(z);
      gzip_member_done_ = false;
    }
    if (raw_left_.empty() && !fill_raw()) {
      if (failed()) return false;
      cut_short_ = true;  // the input ended inside a gzip member
      break;
    }
    z->next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw_left_.data()));
    z->avail_in = static_cast<uInt>(raw_left_.size());
    z->next_out = reinterpret_cast<Bytef*>(decoded_.data());
    z->avail_out = static_cast<uInt>(decoded_.size());
    const int rc = inflate(z, Z_NO_FLUSH);
    const std::size_t consumed = raw_left_.size() - z->avail_in;
    raw_left_.remove_prefix(consumed);
    const std::size_t produced = decoded_.size() - z->avail_out;
    if (rc == Z_STREAM_END) {
      gzip_member_done_ = true;
    } else if ((rc != Z_OK && rc != Z_BUF_ERROR) || (consumed == 0 && produced == 0)) {
      // With input and room for output, zlib moves or fails: standing still would loop forever.
      fail_at(line_number_ + 1,
              std::string("corrupt gzip data (zlib: ") + (z->msg != nullptr ? z->msg : "error") + ")");
      return false;
    }
    if (produced > 0) {
      decoded_.resize(produced);
      return true;
    }
  }
  decoded_.clear();
  decoded_end_ = true;
  return false;
}

TraceReader::Line TraceReader::read_line(std::string* line) {
  line->clear();
  for (;;) {
    if (decoded_pos_ >= decoded_.size() && !fill()) {
      if (failed() || line->empty()) return Line::none;
      ++line_number_;
      return Line::unterminated;
    }
    const std::size_t newline = decoded_.find('\n', decoded_pos_);
    const std::size_t end = newline == std::string::npos ? decoded_.size() : newline;
    if (line->size() + (end - decoded_pos_) > kMaxTraceLineLength) {
      line->append(decoded_, decoded_pos_, kMaxTraceLineLength - line->size());
      fail_at(line_number_ + 1, "a line of over " + std::to_string(kMaxTraceLineLength) +
                                    " bytes: not a trace line: \"" + runtime::printable(*line) + "\"");
      return Line::none;
    }
    line->append(decoded_, decoded_pos_, end - decoded_pos_);
    if (newline == std::string::npos) {
      decoded_pos_ = decoded_.size();
      continue;
    }
    decoded_pos_ = newline + 1;
    ++line_number_;
    return Line::complete;
  }
}

bool TraceReader::next(TraceEvent* event) {
  if (failed()) return false;
  std::string line;
  for (;;) {
    const Line kind = read_line(&line);
    if (kind == Line::none) {
      if (!failed() && cut_short_ && warning_.empty()) {
        warning_ = name_ + ":" + std::to_string(line_number_) +
                   ": warning: the gzip stream ends early (the recorder was likely killed); read up to this line";
      }
      return false;
    }
    if (line.empty() || line == "\r") continue;
    std::string detail;
    std::string_view owner;
    const bool parsed = runtime::parse_trace_line(line, event, &detail, has_owner_ ? &owner : nullptr).ok();
    // A gzip stream that stops short stops anywhere: its last line is cut
    // even when what is left happens to parse.
    if (kind == Line::unterminated && (!parsed || cut_short_)) {
      warning_ = name_ + ":" + std::to_string(line_number_) +
                 ": warning: skipped the last line, cut short (no newline at its end" +
                 (cut_short_ ? ", the gzip stream ends early" : "") + "): \"" + runtime::printable(line) + "\"";
      return false;
    }
    if (!parsed) {
      fail_at(line_number_, detail + " in \"" + runtime::printable(line) + "\"");
      return false;
    }
    event->line = line_number_;
    event->owner = owner_index(owner);
    return true;
  }
}

std::uint32_t TraceReader::owner_index(std::string_view owner) {
  if (owner.empty()) return 0;
  // Consecutive lines often share an owner.
  if (last_owner_ != 0 && owner_keys_[last_owner_] == owner) return last_owner_;
  if (const auto it = owner_index_.find(std::string(owner)); it != owner_index_.end()) {
    last_owner_ = it->second;
    return last_owner_;
  }
  if (owners_.size() >= kMaxOwners) return 0;  // a hostile trace: past this many, names are dropped
  // Names are kept printable; raw names that print alike share one.
  const std::string name = runtime::printable(owner, runtime::kMaxOwnerBytes);
  auto named = std::find(owners_.begin() + 1, owners_.end(), name);
  if (named == owners_.end()) {
    owners_.push_back(name);
    owner_keys_.emplace_back(owner);
    named = owners_.end() - 1;
  }
  last_owner_ = static_cast<std::uint32_t>(named - owners_.begin());
  // Bounded: many long raw names may print alike (cut at kMaxOwnerBytes).
  if (owner_index_.size() < 4 * kMaxOwners) owner_index_.emplace(std::string(owner), last_owner_);
  return last_owner_;
}

bool read_trace_buffer(std::string_view bytes, const std::string& name, std::vector<TraceEvent>* events,
                       std::string* error, std::string* warning, std::vector<std::string>* owners) {
  auto reader = TraceReader::from_buffer(bytes, name);
  if (!reader) {
    *error = name + ": " + reader.status().message();
    return false;
  }
  TraceEvent e;
  while (reader.value()->next(&e)) events->push_back(e);
  if (warning != nullptr) *warning = reader.value()->warning();
  if (owners != nullptr) *owners = reader.value()->owners();
  if (reader.value()->failed()) {
    *error = reader.value()->error();
    return false;
  }
  return true;
}

}  // namespace tidepool::replay
