// Size and unit math: alignment helpers and the parser for human sizes.
//
// Sizes in TIDEPOOL_CONF, tool flags and environment variables share one
// grammar: a non-negative number (integer or decimal) followed by an optional
// unit, B, KiB, MiB, GiB, TiB (powers of 1024) or KB, MB, GB, TB (powers of
// 1000; k/K accepted), or `%` of some whole that the caller supplies later.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tidepool::util {

inline constexpr std::size_t KiB = std::size_t{1} << 10;
inline constexpr std::size_t MiB = std::size_t{1} << 20;
inline constexpr std::size_t GiB = std::size_t{1} << 30;

constexpr bool is_power_of_two(std::size_t x) noexcept { return x != 0 && (x & (x - 1)) == 0; }

// `alignment` must be a power of two.
constexpr std::size_t align_up(std::size_t x, std::size_t alignment) noexcept {
  return (x + alignment - 1) & ~(alignment - 1);
}
constexpr std::size_t align_down(std::size_t x, std::size_t alignment) noexcept {
  return x & ~(alignment - 1);
}
// Any non-zero `multiple`.
constexpr std::size_t round_up(std::size_t x, std::size_t multiple) noexcept {
  return ((x + multiple - 1) / multiple) * multiple;
}

// A parsed size: either absolute bytes or a fraction of a whole not yet known.
struct SizeSpec {
  std::uint64_t bytes = 0;
  double percent = 0.0;  // meaningful when is_percent
  bool is_percent = false;

  // Bytes this spec names given the whole (used only for percentages).
  [[nodiscard]] std::uint64_t resolve(std::uint64_t whole) const noexcept;
};

// Parses "8GiB", "512 MB", "1.5GiB", "4096", "80%". Returns nullopt on any
// malformed input, a negative value, overflow, or a percentage above 100.
std::optional<SizeSpec> parse_size(std::string_view text) noexcept;

// "1.50 GiB", "512 B": for log lines and tables.
std::string format_size(std::uint64_t bytes);

}  // namespace tidepool::util
