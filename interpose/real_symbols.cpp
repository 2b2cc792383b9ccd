// See real_symbols.hpp. RTLD_NEXT is emulated for foreign callers: libc's
// dlsym finds "next" relative to its own caller, which, once our hook sits in
// between, would be libtidepool.so rather than the program.
#include "real_symbols.hpp"

#include <dlfcn.h>
#include <link.h>

#include <cstdint>
#include <cstring>

#include "runtime/runtime.hpp"

namespace tidepool::interpose {

namespace {
DlsymFn resolved_dlsym = nullptr;  // written once; any thread may race to the same value
}  // namespace

TIDEPOOL_UNINSTRUMENTED DlsymFn real_dlsym() {
  DlsymFn real = __atomic_load_n(&resolved_dlsym, __ATOMIC_ACQUIRE);
  if (real != nullptr) return real;
  // GLIBC_2.34 moved dlsym into libc proper; older systems have 2.2.5
  // (x86-64) or 2.17 (aarch64).
  static constexpr const char* kVersions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
  for (const char* version : kVersions) {
    real = reinterpret_cast<DlsymFn>(::dlvsym(RTLD_NEXT, "dlsym", version));
    if (real != nullptr) break;
  }
  __atomic_store_n(&resolved_dlsym, real, __ATOMIC_RELEASE);
  return real;
}

void* next_symbol(const char* name) {
  DlsymFn real = real_dlsym();
  return real != nullptr ? real(RTLD_NEXT, name) : nullptr;
}

void* real_driver_symbol(const char* name) {
  DlsymFn real = real_dlsym();
  if (real == nullptr) return nullptr;
  const runtime::Runtime& rt = runtime::Runtime::get();
  if (const driver::Driver* d = rt.driver()) {
    if (void* fn = real(d->handle(), name)) return fn;
  }
  if (void* fn = real(RTLD_NEXT, name)) return fn;
  // A program that dlopened the driver privately: find it by its soname.
  void* handle = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (handle == nullptr) return nullptr;
  void* fn = real(handle, name);
  ::dlclose(handle);  // NOLOAD took a reference; the library stays loaded
  return fn;
}

namespace {

struct LoadedObject {
  const char* name;
  bool holds_caller;
};

struct ObjectList {
  static constexpr int kMax = 1024;
  LoadedObject objects[kMax];
  int count = 0;
  std::uintptr_t caller = 0;
};

// Collects the loaded objects in load order, marking the one whose segments
// hold the caller. No dlopen here: the loader's list lock is held.
int collect(dl_phdr_info* info, std::size_t, void* data) {
  auto* list = static_cast<ObjectList*>(data);
  if (list->count == ObjectList::kMax) return 1;
  bool holds = false;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    const std::uintptr_t begin = info->dlpi_addr + ph.p_vaddr;
    holds = holds || (list->caller >= begin && list->caller < begin + ph.p_memsz);
  }
  list->objects[list->count++] = {info->dlpi_name, holds};
  return 0;
}

}  // namespace

void* next_after(const void* caller, const char* name) {
  DlsymFn real = real_dlsym();
  if (real == nullptr) return nullptr;
  static thread_local ObjectList list;  // large; kept off the caller's stack
  list.count = 0;
  list.caller = reinterpret_cast<std::uintptr_t>(caller);
  dl_iterate_phdr(&collect, &list);
  bool after = false;
  for (int i = 0; i < list.count; ++i) {
    const LoadedObject& object = list.objects[i];
    if (!after) {
      after = object.holds_caller;
      continue;
    }
    if (object.name == nullptr || object.name[0] == '\0') continue;  // the vdso, the program
    void* handle = ::dlopen(object.name, RTLD_LAZY | RTLD_NOLOAD);
    if (handle == nullptr) continue;
    void* fn = real(handle, name);
    ::dlclose(handle);
    // dlsym on a handle also searches its dependencies; keep only a
    // definition in this very object, as RTLD_NEXT does.
    Dl_info where{};
    if (fn != nullptr && ::dladdr(fn, &where) != 0 && where.dli_fname != nullptr &&
        std::strcmp(where.dli_fname, object.name) == 0) {
      return fn;
    }
  }
  // The caller's object was not found (e.g. code in an anonymous mapping):
  // the best answer left is the global one.
  return after ? nullptr : real(RTLD_DEFAULT, name);
}

}  // namespace tidepool::interpose
