// The allocation trace format: RMM's logging CSV,
//   Thread,Time,Action,Pointer,Size,Stream
// with Time as HH:MM:SS.microseconds (RMM's `%H:%M:%S.%f`; ':' before the
// fraction is read too, and a fraction of up to nanoseconds), Action one of
// allocate, free, "allocate failure", Pointer in hex (or "(nil)"), Size
// decimal or 0x-hex, Stream a handle in 0x-hex, 0 for the default stream
// (decimal is read too). tidepool writes Time from the start of the run, so
// traces replay and plot from zero. Parsing is per line; the writer formats
// into a caller's buffer and never allocates. Reading whole files (plain or
// .gz) lives with the replay tool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "util/status.hpp"

namespace tidepool::runtime {

enum class TraceAction : std::uint8_t { allocate, free, allocate_failure };

struct TraceEvent {
  std::uint64_t thread = 0;
  std::uint64_t time_us = 0;
  TraceAction action = TraceAction::allocate;
  std::uint64_t pointer = 0;
  std::uint64_t size = 0;
  std::uint64_t stream = 0;
  std::uint64_t line = 0;  // 1-based line in the file (the header is line 1)
};

inline constexpr std::string_view kTraceHeader = "Thread,Time,Action,Pointer,Size,Stream";

// Parses one data line. On error the Status message is static; `error_detail`
// (may be null) receives a longer description.
util::Status parse_trace_line(std::string_view line, TraceEvent* event, std::string* error_detail);

// The longest line format_trace_line writes, with room to spare.
inline constexpr std::size_t kMaxTraceLineBytes = 128;

// Formats one event as a CSV line ending in '\n' into `buffer`; returns the
// length, or 0 when the buffer is too small (kMaxTraceLineBytes always
// suffice). No terminating NUL is written.
std::size_t format_trace_line(const TraceEvent& event, char* buffer, std::size_t capacity) noexcept;

}  // namespace tidepool::runtime
