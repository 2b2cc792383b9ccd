// Fuzz target: the RMM-CSV trace reader of tidepool-replay
// (tools/replay/trace_reader.hpp over runtime/trace_format.hpp).
//
// Invariants, for any bytes: the reader returns; reading them from memory
// and from a file (a memfd reached through /proc/self/fd) gives the same
// events, error and warning; an accepted event formats and parses back to
// itself; event line numbers increase; an error or warning names the input
// and a line and is printable ASCII of bounded length. For plain (not gzip)
// input the reader must also agree with a line-by-line model built here from
// parse_trace_line, and reading the same text gzip-compressed must give
// exactly what reading it plain gave.
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.hpp"
#include "runtime/trace_format.hpp"
#include "trace_reader.hpp"

namespace {

using tidepool::replay::kMaxTraceLineLength;
using tidepool::replay::TraceReader;
using tidepool::runtime::TraceEvent;

constexpr std::size_t kMaxEvents = 100000;  // a gzip input may inflate a lot
constexpr std::size_t kMaxMessage = 600;    // beyond the name: quotes are cut at 100 bytes

struct Outcome {
  std::vector<TraceEvent> events;
  std::vector<std::string> owners;  // the reader's names, which events' `owner` index
  std::string error;
  std::string warning;
  [[nodiscard]] const std::string& owner_of(const TraceEvent& e) const {
    FUZZ_CHECK(e.owner < owners.size(), "owner index %u of %zu names", e.owner, owners.size());
    return owners[e.owner];
  }
};

bool same_event(const TraceEvent& a, const TraceEvent& b) {
  return a.thread == b.thread && a.time_us == b.time_us && a.action == b.action && a.pointer == b.pointer &&
         a.size == b.size && a.stream == b.stream && a.line == b.line;
}

void check_same(const Outcome& a, const Outcome& b, const char* what) {
  FUZZ_CHECK(a.error == b.error, "%s: error \"%s\" against \"%s\"", what, a.error.c_str(), b.error.c_str());
  FUZZ_CHECK(a.warning == b.warning, "%s: warning \"%s\" against \"%s\"", what, a.warning.c_str(), b.warning.c_str());
  FUZZ_CHECK(a.events.size() == b.events.size(), "%s: %zu events against %zu", what, a.events.size(), b.events.size());
  for (std::size_t i = 0; i < a.events.size(); ++i) {
    FUZZ_CHECK(same_event(a.events[i], b.events[i]), "%s: event %zu differs", what, i);
    FUZZ_CHECK(a.owner_of(a.events[i]) == b.owner_of(b.events[i]), "%s: event %zu's owner differs", what, i);
  }
}

// Drains a reader opened by `open` (from memory or from a file).
template <typename Opened>
Outcome read_all(Opened opened) {
  FUZZ_CHECK(opened.ok(), "the reader refused to start: %s", opened.status().message());
  TraceReader& reader = *opened.value();
  Outcome out;
  TraceEvent event;
  while (out.events.size() < kMaxEvents && reader.next(&event)) out.events.push_back(event);
  out.error = reader.error();
  out.warning = reader.warning();
  out.owners = reader.owners();
  FUZZ_CHECK(!out.owners.empty() && out.owners[0].empty(), "owner 0 is not the empty name");
  for (const std::string& o : out.owners) {
    for (const char c : o) FUZZ_CHECK(c >= 0x20 && c < 0x7f, "an owner name holds byte 0x%02x", c & 0xff);
  }
  FUZZ_CHECK(reader.failed() == !out.error.empty(), "failed() disagrees with error()");
  return out;
}

// "NAME:LINE: printable text": the line number, or 0 when the text is wrong.
std::uint64_t message_line(const std::string& message, const std::string& name) {
  FUZZ_CHECK(message.compare(0, name.size() + 1, name + ":") == 0, "\"%s\" does not start with the name",
             message.c_str());
  FUZZ_CHECK(message.size() <= name.size() + kMaxMessage, "a message of %zu bytes", message.size());
  for (std::size_t i = name.size(); i < message.size(); ++i) {
    const auto c = static_cast<unsigned char>(message[i]);
    FUZZ_CHECK(c >= 0x20 && c < 0x7f, "message byte 0x%02x at %zu", c, i);
  }
  std::uint64_t line = 0;
  std::size_t i = name.size() + 1;
  for (; i < message.size() && message[i] >= '0' && message[i] <= '9'; ++i) line = line * 10 + (message[i] - '0');
  FUZZ_CHECK(i > name.size() + 1 && message.compare(i, 2, ": ") == 0, "\"%s\" has no line number", message.c_str());
  return line;
}

void check_round_trip(const TraceEvent& event) {
  char line[tidepool::runtime::kMaxTraceLineBytes];
  const std::size_t n = tidepool::runtime::format_trace_line(event, "", line, sizeof line);
  FUZZ_CHECK(n > 0 && line[n - 1] == '\n', "an accepted event does not format");
  TraceEvent again;
  std::string detail;
  std::string_view owner = "unset";
  const auto status = tidepool::runtime::parse_trace_line(std::string_view(line, n - 1), &again, &detail, &owner);
  FUZZ_CHECK(status.ok(), "formatted line \"%.*s\" does not parse: %s", static_cast<int>(n - 1), line, detail.c_str());
  FUZZ_CHECK(owner.empty(), "an event formatted without an owner reads back with one");
  again.line = event.line;
  FUZZ_CHECK(same_event(event, again), "\"%.*s\" parses to another event", static_cast<int>(n - 1), line);
}

void check_outcome(const Outcome& out, const std::string& name) {
  std::uint64_t last = 1;  // the header's
  for (const TraceEvent& e : out.events) {
    FUZZ_CHECK(e.line > last, "event of line %llu after line %llu", static_cast<unsigned long long>(e.line),
               static_cast<unsigned long long>(last));
    last = e.line;
    check_round_trip(e);
  }
  if (!out.error.empty()) message_line(out.error, name);
  if (!out.warning.empty()) message_line(out.warning, name);
}

// What the reader must make of plain text, line by line: the header first;
// blank lines skipped; a line over the length bound an error; a bad line an
// error, unless it is the last and has no newline (cut short: a warning).
// Errors and warnings are compared by their line number only.
void check_plain_model(std::string_view text, const Outcome& out, const std::string& name) {
  std::size_t event = 0;
  auto expect_error = [&](std::uint64_t line) {
    FUZZ_CHECK(!out.error.empty(), "no error, expected one at line %llu", static_cast<unsigned long long>(line));
    FUZZ_CHECK(message_line(out.error, name) == line, "error \"%s\", expected one at line %llu", out.error.c_str(),
               static_cast<unsigned long long>(line));
    FUZZ_CHECK(event == out.events.size(), "%zu events before the error, expected %zu", out.events.size(), event);
  };
  if (text.empty()) return expect_error(1);
  std::uint64_t number = 0;
  bool has_owner = false;
  while (!text.empty()) {
    const std::size_t newline = text.find('\n');
    const bool terminated = newline != std::string_view::npos;
    const std::string_view line = text.substr(0, newline);
    text.remove_prefix(terminated ? newline + 1 : text.size());
    ++number;
    if (line.size() > kMaxTraceLineLength) return expect_error(number);
    if (number == 1) {
      std::string_view header = line;
      if (!header.empty() && header.back() == '\r') header.remove_suffix(1);
      has_owner = header == tidepool::runtime::kTraceHeader;
      if (!has_owner && header != tidepool::runtime::kRmmTraceHeader) return expect_error(1);
      continue;
    }
    if (line.empty() || line == "\r") continue;
    TraceEvent expected;
    std::string_view owner;
    const bool parsed =
        tidepool::runtime::parse_trace_line(line, &expected, nullptr, has_owner ? &owner : nullptr).ok();
    if (!terminated && !parsed) {
      FUZZ_CHECK(out.error.empty() && !out.warning.empty() && message_line(out.warning, name) == number,
                 "a cut-short last line %llu: error \"%s\", warning \"%s\"", static_cast<unsigned long long>(number),
                 out.error.c_str(), out.warning.c_str());
      FUZZ_CHECK(event == out.events.size(), "%zu events, expected %zu", out.events.size(), event);
      return;
    }
    if (!parsed) return expect_error(number);
    if (event == kMaxEvents) return;
    expected.line = number;
    FUZZ_CHECK(event < out.events.size() && same_event(out.events[event], expected),
               "line %llu is not read as its event", static_cast<unsigned long long>(number));
    // Its owner, by name (printable), unless the reader's table was full.
    const std::string& named = out.owner_of(out.events[event]);
    FUZZ_CHECK(named == tidepool::runtime::printable(owner, tidepool::runtime::kMaxOwnerBytes) ||
                   (named.empty() && out.owners.size() >= 4096),
               "line %llu's owner is read as \"%s\"", static_cast<unsigned long long>(number), named.c_str());
    ++event;
  }
  FUZZ_CHECK(out.error.empty() && out.warning.empty(), "plain text read to its end: error \"%s\", warning \"%s\"",
             out.error.c_str(), out.warning.c_str());
  FUZZ_CHECK(event == out.events.size(), "%zu events, expected %zu", out.events.size(), event);
}

std::string gzip(std::string_view text) {
  z_stream z{};
  FUZZ_CHECK(deflateInit2(&z, 1, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK, "deflateInit2");
  std::string out(deflateBound(&z, text.size()) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  FUZZ_CHECK(deflate(&z, Z_FINISH) == Z_STREAM_END, "deflate");
  out.resize(out.size() - z.avail_out);
  deflateEnd(&z);
  return out;
}

// One memfd for the whole run, rewritten for each input.
int input_fd() {
  static const int fd = [] {
    const int made = ::memfd_create("fuzz_trace", 0);
    FUZZ_CHECK(made >= 0, "memfd_create failed");
    return made;
  }();
  return fd;
}

void write_input(int fd, std::string_view text) {
  FUZZ_CHECK(::ftruncate(fd, 0) == 0, "ftruncate failed");
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t n = ::pwrite(fd, text.data() + done, text.size() - done, static_cast<off_t>(done));
    FUZZ_CHECK(n > 0, "pwrite failed");
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const int fd = input_fd();
  write_input(fd, text);
  const std::string name = "/proc/self/fd/" + std::to_string(fd);

  const Outcome from_memory = read_all(TraceReader::from_buffer(text, name));
  check_outcome(from_memory, name);
  check_same(read_all(TraceReader::open(name)), from_memory, "file against memory");

  const bool gzip_magic = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
  if (!gzip_magic) {
    check_plain_model(text, from_memory, name);
    const std::string compressed = gzip(text);
    check_same(read_all(TraceReader::from_buffer(compressed, name)), from_memory, "gzip against plain");
  }
  return 0;
}
