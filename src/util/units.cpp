// The size grammar of units.hpp. Hand-written rather than strtod-based so that
// the locale never changes what a config string means.
#include "util/units.hpp"

#include <array>
#include <cmath>
#include <cstdio>

namespace tidepool::util {

namespace {

struct Unit {
  std::string_view name;
  std::uint64_t scale;
};

constexpr std::array<Unit, 14> kUnits{{
    {"B", 1},
    {"KiB", 1ULL << 10},
    {"MiB", 1ULL << 20},
    {"GiB", 1ULL << 30},
    {"TiB", 1ULL << 40},
    {"KB", 1000ULL},
    {"kB", 1000ULL},
    {"K", 1000ULL},
    {"k", 1000ULL},
    {"MB", 1000ULL * 1000},
    {"GB", 1000ULL * 1000 * 1000},
    {"TB", 1000ULL * 1000 * 1000 * 1000},
    {"M", 1000ULL * 1000},
    {"G", 1000ULL * 1000 * 1000},
}};

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

std::uint64_t SizeSpec::resolve(std::uint64_t whole) const noexcept {
  if (!is_percent) return bytes;
  return static_cast<std::uint64_t>(std::floor(static_cast<long double>(whole) * percent / 100.0L));
}

std::optional<SizeSpec> parse_size(std::string_view text) noexcept {
  text = trim(text);
  if (text.empty()) return std::nullopt;

  // Integer part and optional fraction, digits only: no sign, no exponent.
  std::size_t i = 0;
  long double value = 0;
  bool any_digit = false;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
    value = value * 10 + (text[i] - '0');
    any_digit = true;
    ++i;
  }
  if (i < text.size() && text[i] == '.') {
    ++i;
    long double scale = 0.1L;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
      value += (text[i] - '0') * scale;
      scale /= 10;
      any_digit = true;
      ++i;
    }
  }
  if (!any_digit) return std::nullopt;
  std::string_view unit = trim(text.substr(i));

  SizeSpec spec;
  if (unit == "%") {
    if (value > 100.0L) return std::nullopt;
    spec.is_percent = true;
    spec.percent = static_cast<double>(value);
    return spec;
  }
  std::uint64_t scale = 1;
  if (!unit.empty()) {
    bool found = false;
    for (const Unit& u : kUnits) {
      if (u.name == unit) {
        scale = u.scale;
        found = true;
        break;
      }
    }
    if (!found) return std::nullopt;
  }
  // Rounded to the nearest byte in long double, then converted: llround
  // returns a signed long long, which saturates from 2^63 on.
  const long double bytes = std::round(value * static_cast<long double>(scale));
  if (bytes >= 18446744073709551615.0L) return std::nullopt;
  spec.bytes = static_cast<std::uint64_t>(bytes);
  return spec;
}

std::string format_size(std::uint64_t bytes) {
  constexpr std::array<const char*, 5> kNames{"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < kNames.size()) {
    value /= 1024.0;
    ++unit;
  }
  std::array<char, 48> buffer{};
  if (unit == 0) {
    std::snprintf(buffer.data(), buffer.size(), "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buffer.data(), buffer.size(), "%.2f %s", value, kNames[unit]);
  }
  return buffer.data();
}

}  // namespace tidepool::util
