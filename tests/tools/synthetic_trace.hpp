// Test support for the replay tool: traces built event by event, with the
// shapes training produces (setup, then steps that allocate and free).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "trace_reader.hpp"

namespace tidepool::replay::testing {

inline constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;

// The header line every trace file starts with.
inline constexpr const char* kTraceHeader = "Thread,Time,Action,Pointer,Size,Stream\n";

// One event as line `line` of a trace holds it, at time `line` us.
inline TraceEvent ev(TraceAction action, std::uint64_t pointer, std::uint64_t size, std::uint64_t line,
                     std::uint64_t stream = 0) {
  return TraceEvent{0, line, action, pointer, size, stream, line};
}

// Pointers are never reused, as in a real trace; line numbers count from 2
// (the header is line 1).
class TraceBuilder {
 public:
  std::uint64_t allocate(std::uint64_t size) {
    const std::uint64_t pointer = next_pointer_;
    next_pointer_ += 0x1000;
    events_.push_back(TraceEvent{0, events_.size(), TraceAction::allocate, pointer, size, 0, events_.size() + 2});
    return pointer;
  }
  void free(std::uint64_t pointer) {
    events_.push_back(TraceEvent{0, events_.size(), TraceAction::free, pointer, 0, 0, events_.size() + 2});
  }
  // A step: every size allocated, then all of it freed, as a forward and
  // backward pass leave nothing behind.
  void step(const std::vector<std::uint64_t>& sizes) {
    std::vector<std::uint64_t> pointers;
    pointers.reserve(sizes.size());
    for (std::uint64_t s : sizes) pointers.push_back(allocate(s));
    for (std::uint64_t p : pointers) free(p);
  }
  [[nodiscard]] const std::vector<TraceEvent>& events() const { return events_; }

 private:
  std::vector<TraceEvent> events_;
  std::uint64_t next_pointer_ = 0x10000;
};

// `count` sizes uniform in [1, max], the same for the same seed.
inline std::vector<std::uint64_t> random_sizes(std::size_t count, unsigned seed,
                                               std::uint64_t max = std::uint64_t{1} << 24) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::uint64_t> size(1, max);
  std::vector<std::uint64_t> sizes(count);
  for (auto& s : sizes) s = size(rng);
  return sizes;
}

}  // namespace tidepool::replay::testing
