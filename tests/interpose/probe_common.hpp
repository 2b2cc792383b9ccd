// Shared by the preload probes: a check that names what failed on stderr
// and turns the exit status non-zero, and byte patterns written through
// device pointers (sim device memory is host-addressable).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace probe {

inline int failures = 0;

#define PROBE_CHECK(cond)                                                           \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      ++::probe::failures;                                                          \
    }                                                                               \
  } while (0)

inline void fill(std::uintptr_t address, std::size_t size, unsigned seed) {
  auto* p = reinterpret_cast<unsigned char*>(address);
  for (std::size_t i = 0; i < size; ++i) p[i] = static_cast<unsigned char>(seed + i * 7);
}

inline bool holds(std::uintptr_t address, std::size_t size, unsigned seed) {
  const auto* p = reinterpret_cast<const unsigned char*>(address);
  for (std::size_t i = 0; i < size; ++i) {
    if (p[i] != static_cast<unsigned char>(seed + i * 7)) return false;
  }
  return true;
}

// The exit status every probe ends with when all its checks held; distinct
// from 0 so that a test sees the program's own status come through.
constexpr int kPassed = 42;

inline int finish(const char* mode) {
  std::printf("%s: %s\n", mode, failures == 0 ? "passed" : "FAILED");
  return failures == 0 ? kPassed : 1;
}

}  // namespace probe
