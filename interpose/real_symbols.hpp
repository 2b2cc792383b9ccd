// Finding the functions tidepool's hooks stand in front of.
//
// - libc's dlsym, found with dlvsym so that our own dlsym hook is never
//   consulted and nothing recurses;
// - the real driver's entry points, from the driver tidepool opened (the same
//   loaded libcuda.so.1 the program uses), else from the next definition after
//   libtidepool.so in the global search order;
// - the program's cudart functions, which are always the next definition.
// Each lookup is resolved once and cached in a slot the caller owns, so a
// hook's steady state is one relaxed atomic load.
#pragma once

#include <atomic>

// For code that runs while a sanitizer runtime is still starting (it resolves
// its interceptors through our dlsym before its shadow memory is usable):
// no instrumentation, no function-local statics. Every sanitizer a build may
// use is named: TSan's runtime, like ASan's, calls our dlsym from its own
// initialisation, and an instrumented call there (a __tsan_func_entry, or the
// __tsan_atomic load GCC makes of __atomic_load_n) touches a thread state that
// does not exist yet. GCC's no_sanitize("thread") drops all of it; Clang keeps
// function entry/exit and atomics unless told disable_sanitizer_instrumentation.
#if defined(__clang__) && defined(__has_attribute)
#if __has_attribute(disable_sanitizer_instrumentation)
#define TIDEPOOL_UNINSTRUMENTED \
  __attribute__((no_sanitize("address", "undefined", "thread"), disable_sanitizer_instrumentation))
#endif
#endif
#ifndef TIDEPOOL_UNINSTRUMENTED
#define TIDEPOOL_UNINSTRUMENTED __attribute__((no_sanitize("address", "undefined", "thread")))
#endif

namespace tidepool::interpose {

using DlsymFn = void* (*)(void*, const char*);

// libc's dlsym, found with dlvsym over both glibc symbol versions.
TIDEPOOL_UNINSTRUMENTED DlsymFn real_dlsym();

// The next definition of `name` after libtidepool.so, or null.
void* next_symbol(const char* name);

// The real driver's exported `name` (e.g. "cuMemAlloc_v2"), or null.
void* real_driver_symbol(const char* name);

// What dlsym(RTLD_NEXT, name) returns when called from code at `caller`:
// the first definition in an object loaded after the caller's.
void* next_after(const void* caller, const char* name);

// `lookup(name)`, typed, resolved on first use and cached in `slot`.
template <typename Fn>
Fn resolve_once(const char* name, std::atomic<void*>& slot, void* (*lookup)(const char*)) {
  void* fn = slot.load(std::memory_order_acquire);
  if (fn == nullptr) {
    fn = lookup(name);
    slot.store(fn, std::memory_order_release);
  }
  return reinterpret_cast<Fn>(fn);
}

// The address of `name` in the real driver, resolved on first use.
template <typename Fn>
Fn real_driver(const char* name, std::atomic<void*>& slot) {
  return resolve_once<Fn>(name, slot, &real_driver_symbol);
}

// The next definition of `name` (the program's cudart), resolved on first use.
template <typename Fn>
Fn next(const char* name, std::atomic<void*>& slot) {
  return resolve_once<Fn>(name, slot, &next_symbol);
}

}  // namespace tidepool::interpose

// The real driver's `symbol`, typed, cached in a slot of the calling site.
#define TIDEPOOL_REAL_DRIVER(symbol)                                               \
  ([] {                                                                            \
    static std::atomic<void*> slot{nullptr};                                       \
    return ::tidepool::interpose::real_driver<decltype(&::symbol)>(#symbol, slot); \
  }())
// Calls the real driver's `symbol`, or answers CUDA_ERROR_NOT_INITIALIZED
// when no driver could be loaded (the log has said why): a program linked
// to libtidepool.so with no driver must get an error, never a null call.
#define TIDEPOOL_CALL_REAL_DRIVER(symbol, ...)                               \
  ([&] {                                                                     \
    auto real = TIDEPOOL_REAL_DRIVER(symbol);                                \
    return real == nullptr ? CUDA_ERROR_NOT_INITIALIZED : real(__VA_ARGS__); \
  }())
// The program's own cudart `symbol`, typed, cached likewise.
#define TIDEPOOL_NEXT(symbol)                                               \
  ([] {                                                                     \
    static std::atomic<void*> slot{nullptr};                                \
    return ::tidepool::interpose::next<decltype(&::symbol)>(#symbol, slot); \
  }())
