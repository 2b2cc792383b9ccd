// Parsing and formatting lines of RMM logging CSV: the one place a trace
// line's text becomes numbers, so the range checks live here.
#include "runtime/trace_format.hpp"

#include <charconv>
#include <cstring>

namespace tidepool::runtime {

namespace {

// Why a number did not parse; null when it did.
const char* parse_number(std::string_view text, std::uint64_t* out, int base) {
  if (text.empty()) return "empty";
  if (text[0] == '-') return "negative";
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *out, base);
  if (ec == std::errc::result_out_of_range) return "out of range";
  if (ec != std::errc() || ptr != end) return "not a number";
  return nullptr;
}

// Decimal, or hex with a 0x prefix.
const char* parse_integer(std::string_view text, std::uint64_t* out) {
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    return parse_number(text.substr(2), out, 16);
  }
  return parse_number(text, out, 10);
}

// Hex with or without 0x; "(nil)" is how printf's %p writes RMM's null
// pointer on an allocate failure.
const char* parse_pointer(std::string_view text, std::uint64_t* out) {
  if (text == "(nil)") {
    *out = 0;
    return nullptr;
  }
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) text.remove_prefix(2);
  return parse_number(text, out, 16);
}

// HH:MM:SS:ffffff or HH:MM:SS.ffffff, fraction of any length up to 9 digits.
// Hours are not bounded by a day (tidepool counts from the start of the run),
// but the total must fit in microseconds without wrapping.
const char* parse_time(std::string_view text, std::uint64_t* us) {
  std::uint64_t parts[3] = {0, 0, 0};
  for (int i = 0; i < 3; ++i) {
    const std::size_t sep = text.find_first_of(":.");
    if (sep == std::string_view::npos) return "not HH:MM:SS.ffffff";
    if (const char* why = parse_number(text.substr(0, sep), &parts[i], 10)) return why;
    text.remove_prefix(sep + 1);
  }
  if (parts[1] > 59 || parts[2] > 60) return "minutes or seconds out of range";
  if (text.empty() || text.size() > 9) return "not HH:MM:SS.ffffff";
  std::uint64_t fraction = 0;
  if (const char* why = parse_number(text, &fraction, 10)) return why;
  for (std::size_t digits = text.size(); digits < 6; ++digits) fraction *= 10;
  for (std::size_t digits = text.size(); digits > 6; --digits) fraction /= 10;
  std::uint64_t total = 0;
  if (__builtin_mul_overflow(parts[0], std::uint64_t{3600} * 1000000, &total) ||
      __builtin_add_overflow(total, (parts[1] * 60 + parts[2]) * 1000000 + fraction, &total)) {
    return "out of range";
  }
  *us = total;
  return nullptr;
}

}  // namespace

std::string printable(std::string_view text, std::size_t limit) {
  std::string out;
  for (char c : text) {
    if (out.size() >= limit) {
      out += "...";
      break;
    }
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f) {
      out += c;
    } else {
      out += "\\x";
      out += "0123456789abcdef"[byte >> 4];
      out += "0123456789abcdef"[byte & 0xf];
    }
  }
  return out;
}

std::string owner_text(std::string_view name) {
  std::string out;
  for (const char c : name.substr(0, kMaxOwnerBytes)) {
    const bool plain = c >= 0x20 && c < 0x7f && c != ',' && c != '"';
    out += plain ? c : '_';
  }
  return out;
}

util::Status parse_trace_line(std::string_view line, TraceEvent* event, std::string* detail, std::string_view* owner) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  std::string_view fields[7];
  std::size_t count = 0;
  while (count < 7) {
    const std::size_t comma = line.find(',');
    fields[count++] = line.substr(0, comma);
    if (comma == std::string_view::npos) {
      line = {};
      break;
    }
    line.remove_prefix(comma + 1);
  }
  const std::size_t most = owner != nullptr ? 7 : 6;
  if (count < 6 || count > most || !line.empty()) {
    if (detail != nullptr) {
      *detail = std::string(owner != nullptr
                                ? "expected 7 comma-separated columns (Thread,Time,Action,Pointer,Size,Stream,Owner)"
                                : "expected 6 comma-separated columns (Thread,Time,Action,Pointer,Size,Stream)") +
                ", found " + (count > most || !line.empty() ? std::string("more") : std::to_string(count));
    }
    return {util::Error::bad_input, "wrong number of columns"};
  }
  auto fail = [&](const char* what, std::string_view value, const char* why) {
    if (detail != nullptr) *detail = std::string(what) + " \"" + printable(value, 40) + "\" (" + why + ")";
    return util::Status(util::Error::bad_input, what);
  };
  if (const char* why = parse_integer(fields[0], &event->thread)) return fail("bad thread id", fields[0], why);
  if (const char* why = parse_time(fields[1], &event->time_us)) return fail("bad time", fields[1], why);
  if (fields[2] == "allocate") {
    event->action = TraceAction::allocate;
  } else if (fields[2] == "free") {
    event->action = TraceAction::free;
  } else if (fields[2] == "allocate failure") {
    event->action = TraceAction::allocate_failure;
  } else {
    return fail("unknown action", fields[2], "not allocate, free or allocate failure");
  }
  if (const char* why = parse_pointer(fields[3], &event->pointer)) return fail("bad pointer", fields[3], why);
  if (const char* why = parse_integer(fields[4], &event->size)) return fail("bad size", fields[4], why);
  if (event->action != TraceAction::allocate_failure && event->size > kMaxTraceSize) {
    return fail("bad size", fields[4], "over 256 TiB, more than any device holds");
  }
  if (const char* why = parse_integer(fields[5], &event->stream)) return fail("bad stream", fields[5], why);
  if (owner != nullptr) *owner = count == 7 ? fields[6] : std::string_view();
  return util::Status::success();
}

namespace {

char* put_decimal(char* out, std::uint64_t value, int min_digits = 1) noexcept {
  char digits[20];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value != 0);
  while (n < min_digits) digits[n++] = '0';
  while (n > 0) *out++ = digits[--n];
  return out;
}

char* put_hex(char* out, std::uint64_t value) noexcept {
  char digits[16];
  int n = 0;
  do {
    digits[n++] = "0123456789abcdef"[value & 0xf];
    value >>= 4;
  } while (value != 0);
  while (n > 0) *out++ = digits[--n];
  return out;
}

char* put_text(char* out, std::string_view text) noexcept {
  for (char c : text) *out++ = c;
  return out;
}

}  // namespace

// As RMM writes a line: Time `%H:%M:%S.%f`, Pointer `%p`, Stream the stream
// handle in hex (the default stream as 0). Hand-formatted: this runs once per
// event on the writer thread, and snprintf would be most of its cost.
std::size_t format_trace_line(const TraceEvent& e, std::string_view owner, char* buffer,
                              std::size_t capacity) noexcept {
  char line[kMaxTraceLineBytes];
  char* out = line;
  out = put_decimal(out, e.thread);
  *out++ = ',';
  const std::uint64_t seconds = e.time_us / 1000000;
  out = put_decimal(out, seconds / 3600, 2);
  *out++ = ':';
  out = put_decimal(out, (seconds / 60) % 60, 2);
  *out++ = ':';
  out = put_decimal(out, seconds % 60, 2);
  *out++ = '.';
  out = put_decimal(out, e.time_us % 1000000, 6);
  *out++ = ',';
  out = put_text(out, e.action == TraceAction::allocate ? "allocate"
                      : e.action == TraceAction::free   ? "free"
                                                        : "allocate failure");
  out = put_text(out, ",0x");
  out = put_hex(out, e.pointer);
  *out++ = ',';
  out = put_decimal(out, e.size);
  *out++ = ',';
  if (e.stream != 0) out = put_text(out, "0x");
  out = put_hex(out, e.stream);
  *out++ = ',';
  out = put_text(out, owner.substr(0, kMaxOwnerBytes));
  *out++ = '\n';
  const auto n = static_cast<std::size_t>(out - line);
  if (n >= capacity) return 0;
  std::memcpy(buffer, line, n);
  return n;
}

}  // namespace tidepool::runtime
