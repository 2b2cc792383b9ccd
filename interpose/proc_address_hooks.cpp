// cuGetProcAddress and cuGetProcAddress_v2: how a static cudart, nvcc's
// default, reaches the driver. The real resolver answers first, honouring the
// requested version and flags; if the function it hands out is one we hook,
// the caller gets our hook instead. Asked for the resolver itself, it gets
// our wrapper, so later lookups come back through here too.
#include "hooks.hpp"
#include "real_symbols.hpp"
#include "runtime/runtime.hpp"

namespace tidepool::interpose {

namespace {

using ResolverV2 = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
using ResolverV1 = CUresult (*)(const char*, void**, int, cuuint64_t);

std::atomic<void*> real_v1_slot{nullptr};
std::atomic<void*> real_v2_slot{nullptr};

CUresult substitute(const char* symbol, CUresult result, void** pfn) {
  if (result != CUDA_SUCCESS || pfn == nullptr || *pfn == nullptr) return result;
  if (runtime::Runtime::get().passthrough()) return result;
  void* hook = hook_for_real_address(*pfn);
  capture_entry_resolved(symbol, hook != nullptr);
  if (hook != nullptr) *pfn = hook;
  return result;
}

}  // namespace

}  // namespace tidepool::interpose

TIDEPOOL_HOOK CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                           CUdriverProcAddressQueryResult* status) {
  using namespace tidepool::interpose;
  auto real = real_driver<ResolverV2>("cuGetProcAddress_v2", real_v2_slot);
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  return substitute(symbol, real(symbol, pfn, version, flags, status), pfn);
}

TIDEPOOL_HOOK CUresult tidepool_cuGetProcAddress_v1(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  using namespace tidepool::interpose;
  auto real = real_driver<ResolverV1>("cuGetProcAddress", real_v1_slot);
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  return substitute(symbol, real(symbol, pfn, version, flags), pfn);
}
