// dlsym: programs and libraries that dlopen libcuda and look its symbols up
// themselves (cudart, static or shared, does exactly this for
// cuGetProcAddress) get our hooks in place of the driver's.
//
// The caller's handle is respected: the lookup is libc's own, and we only
// substitute when it found a definition of a hooked driver symbol. RTLD_NEXT
// is resolved relative to the caller, not to us. Nothing here calls our own
// dlsym, so nothing recurses.
#include <dlfcn.h>

#include "hooks.hpp"
#include "real_symbols.hpp"
#include "runtime/runtime.hpp"

namespace tidepool::interpose {

namespace {

// dlfcn.h declares dlsym's name nonnull; callers still pass null at times.
TIDEPOOL_UNINSTRUMENTED bool is_cuda_name(const char* name) {
  return name != nullptr && name[0] == 'c' && name[1] == 'u';
}

bool started = false;  // set once libtidepool.so's constructors run

__attribute__((constructor)) void mark_started() { __atomic_store_n(&started, true, __ATOMIC_RELEASE); }

// Only for CUDA names: ordinary lookups never reach instrumented code.
void* substitute(const char* name, void* found) {
  if (found == nullptr) return found;
  void* hook = hook_for_driver_symbol(name);
  if (hook == nullptr) {
    capture_entry_resolved(name, false);
    return found;
  }
  if (hook == found) return found;
  // The runtime is only consulted for hooked names, so ordinary lookups
  // never create it.
  if (runtime::Runtime::get().passthrough()) return found;
  return hook;
}

}  // namespace

}  // namespace tidepool::interpose

TIDEPOOL_HOOK TIDEPOOL_UNINSTRUMENTED void* dlsym(void* handle, const char* name) {
  using namespace tidepool::interpose;
  DlsymFn real = real_dlsym();
  if (real == nullptr) return nullptr;
  // Until our constructors have run, the process is still starting (a
  // sanitizer runtime resolves its interceptors here before its shadow
  // memory is usable): libc answers, relative to us, which for those early
  // callers, loaded before us, is the same answer.
  if (!__atomic_load_n(&started, __ATOMIC_ACQUIRE)) return real(handle, name);
  if (handle == RTLD_NEXT) {
    void* found = next_after(__builtin_return_address(0), name);
    return is_cuda_name(name) ? substitute(name, found) : found;
  }
  void* found = real(handle, name);
  return is_cuda_name(name) ? substitute(name, found) : found;
}
