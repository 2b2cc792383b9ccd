// The allocation trace format: RMM's logging CSV,
//   Thread,Time,Action,Pointer,Size,Stream
// and tidepool's extra column Owner, which RMM's readers (by column name)
// ignore: the library that asked for an allocation (its file's base name),
// empty on frees and where not known. Owner text never holds a comma, a
// quote or a control byte, so no field is quoted. Both headers are read,
// with Time as HH:MM:SS.microseconds (RMM's `%H:%M:%S.%f`; ':' before the
// fraction is read too, and a fraction of up to nanoseconds), Action one of
// allocate, free, "allocate failure", Pointer in hex (or "(nil)"), Size
// decimal or 0x-hex, Stream a handle in 0x-hex, 0 for the default stream
// (decimal is read too). tidepool writes Time from the start of the run, so
// traces replay and plot from zero. Parsing is per line; the writer formats
// into a caller's buffer and never allocates. Reading whole files (plain or
// .gz) lives with the replay tool.
//
// Parsing takes hostile input: every number is range-checked (no wrap, no
// sign), and a size no device could hold is refused on allocate and free
// lines (see kMaxTraceSize). What a bad line says is made printable first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "util/util.hpp"

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
  // Who asked: when read, the Owner column as an index into the reader's
  // names (0: none); the recorder keeps its own tag apart.
  std::uint32_t owner = 0;
};

inline constexpr std::string_view kTraceHeader = "Thread,Time,Action,Pointer,Size,Stream,Owner";
// RMM's own header, without Owner: read the same.
inline constexpr std::string_view kRmmTraceHeader = "Thread,Time,Action,Pointer,Size,Stream";
// The longest Owner text written.
inline constexpr std::size_t kMaxOwnerBytes = 64;

// `name` as Owner text: at most kMaxOwnerBytes, printable ASCII but for ',' and '"'.
std::string owner_text(std::string_view name);

// The largest size an allocate or free line may carry: 256 TiB, more than any
// device's memory and than CUDA's unified address space maps. Past it a size
// is a corrupt trace, and sums of such sizes would wrap. A refused request
// ("allocate failure") may ask for anything: programs do ask for absurd
// sizes, and the replay counts those as failed without asking a target.
inline constexpr std::uint64_t kMaxTraceSize = std::uint64_t{1} << 48;

// `text` as printable ASCII for an error message: other bytes become \xNN,
// and past `limit` characters it is cut and ends in "...".
std::string printable(std::string_view text, std::size_t limit = 100);

// Parses one data line. On error the Status message is static;
// `error_detail` (may be null) receives a longer description. With `owner`
// (a trace whose header has Owner) a seventh column is read into it (empty
// when the line has none); without, a line has exactly six. event->owner is
// left alone.
util::Status parse_trace_line(std::string_view line, TraceEvent* event, std::string* error_detail,
                              std::string_view* owner = nullptr);

// The longest line format_trace_line writes, with room to spare.
inline constexpr std::size_t kMaxTraceLineBytes = 128 + kMaxOwnerBytes;

// Formats one event as a CSV line ending in '\n' into `buffer`, with `owner`
// (owner_text already) in the Owner column; returns the length, or 0 when
// the buffer is too small (kMaxTraceLineBytes always suffice). No
// terminating NUL is written.
std::size_t format_trace_line(const TraceEvent& event, std::string_view owner, char* buffer,
                              std::size_t capacity) noexcept;

}  // namespace tidepool::runtime
