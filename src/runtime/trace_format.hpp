// The allocation trace format: RMM's logging CSV,
//   Thread,Time,Action,Pointer,Size,Stream
// with Time as HH:MM:SS:microseconds since the start of the run (RMM's own
// logs use '.' before the fraction; both are read), Action one of allocate,
// free, "allocate failure", Pointer in hex, Size and Stream decimal or hex.
// Parsing is per line; the writer formats into a caller's buffer and never
// allocates. Reading whole files (plain or .gz) lives with the replay tool.
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

// Formats one event as a CSV line ending in '\n' into `buffer`; returns the
// length, or 0 when the buffer is too small (96 bytes always suffice).
std::size_t format_trace_line(const TraceEvent& event, char* buffer, std::size_t capacity) noexcept;

}  // namespace tidepool::runtime
