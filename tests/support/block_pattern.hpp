// Test support: the pattern workloads write into pool blocks and check
// later. Word i of a block holds expected_word(tag, i), so a block moved,
// overlapped, handed out twice or with a page lost reads wrong. Only a
// sample of words is touched (every word of the first and last 4 KiB, one
// per 1 KiB between), so large blocks cost little and every 4 KiB page of
// every block is still seen.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace tidepool::testing {

inline std::uint64_t expected_word(std::uint64_t tag, std::size_t index) {
  return tag ^ (static_cast<std::uint64_t>(index) * 0x9e3779b97f4a7c15ULL);
}

template <typename Visit>
void for_each_sampled_word(std::size_t words, Visit visit) {
  constexpr std::size_t kEdge = 512;    // 4 KiB of words
  constexpr std::size_t kStride = 128;  // 1 KiB
  const std::size_t head = std::min(words, kEdge);
  for (std::size_t i = 0; i < head; ++i) visit(i);
  const std::size_t tail = words > 2 * kEdge ? words - kEdge : head;
  for (std::size_t i = head; i < tail; i += kStride) visit(i);
  for (std::size_t i = tail; i < words; ++i) visit(i);
}

inline void fill_pattern(std::uint64_t* words, std::size_t count, std::uint64_t tag) {
  for_each_sampled_word(count, [&](std::size_t i) { words[i] = expected_word(tag, i); });
}

inline bool holds_pattern(const std::uint64_t* words, std::size_t count, std::uint64_t tag) {
  bool intact = true;
  for_each_sampled_word(count, [&](std::size_t i) { intact = intact && words[i] == expected_word(tag, i); });
  return intact;
}

}  // namespace tidepool::testing
