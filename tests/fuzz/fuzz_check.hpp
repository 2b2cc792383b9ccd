// The fuzz targets' one assertion. A violated invariant must stop the run in
// every build (libFuzzer saves the input on abort; the corpus replay fails
// its ctest), so it neither depends on NDEBUG nor throws.
#pragma once

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(condition, ...)                                                               \
  do {                                                                                           \
    if (!(condition)) {                                                                          \
      std::fprintf(stderr, "%s:%d: invariant violated: %s\n  ", __FILE__, __LINE__, #condition); \
      std::fprintf(stderr, __VA_ARGS__);                                                         \
      std::fputc('\n', stderr);                                                                  \
      std::abort();                                                                              \
    }                                                                                            \
  } while (false)
