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

void* substitute(const char* name, void* found) {
  if (found == nullptr || name == nullptr) return found;
  void* hook = hook_for_driver_symbol(name);
  if (hook == nullptr || hook == found) return found;
  // The runtime is only consulted for hooked names, so ordinary lookups
  // never create it.
  if (runtime::Runtime::get().passthrough()) return found;
  return hook;
}

}  // namespace

}  // namespace tidepool::interpose

TIDEPOOL_HOOK void* dlsym(void* handle, const char* name) {
  using namespace tidepool::interpose;
  DlsymFn real = real_dlsym();
  if (real == nullptr) return nullptr;
  // RTLD_NEXT is emulated relative to the caller only for CUDA names: other
  // lookups (a sanitizer runtime resolving its interceptors while the process
  // starts, among them) must not reach the loader's lists that early.
  const bool cuda_name = name != nullptr && name[0] == 'c' && name[1] == 'u';
  void* found = handle == RTLD_NEXT && cuda_name ? next_after(__builtin_return_address(0), name) : real(handle, name);
  return substitute(name, found);
}
