// Stream lifetime hooks: cuStreamCreate, cuStreamCreateWithPriority,
// cuGreenCtxStreamCreate and cuStreamDestroy (both ABI versions); cudart's
// stream calls reach these through cuGetProcAddress. They call the driver and tell the runtime, which keeps
// the registry that makes cudaFree-semantics fences cover every stream; the
// destroy is told before the driver destroys the stream, so the stream can
// still take a record.
//
// The probe below tells the runtime whether these hooks are what the process
// calls (they are under LD_PRELOAD, and in a program linked with libtidepool
// ahead of libcuda); only then is the registry known to be complete.
#include <cuda.h>
#include <dlfcn.h>

#include <atomic>

#include "hooks.hpp"
#include "real_symbols.hpp"
#include "route.hpp"
#include "runtime/runtime.hpp"

namespace tidepool::interpose {

namespace {

bool stream_hooks_in_front() {
  DlsymFn real = real_dlsym();
  if (real == nullptr) return false;
  auto ours = [&](const char* name, const void* hook) { return real(RTLD_DEFAULT, name) == hook; };
  return ours("cuStreamCreate", reinterpret_cast<void*>(&::cuStreamCreate)) &&
         ours("cuStreamCreateWithPriority", reinterpret_cast<void*>(&::cuStreamCreateWithPriority)) &&
         ours("cuGreenCtxStreamCreate", reinterpret_cast<void*>(&::cuGreenCtxStreamCreate)) &&
         ours("cuStreamDestroy_v2", reinterpret_cast<void*>(&::cuStreamDestroy_v2)) &&
         ours("cuStreamDestroy", reinterpret_cast<void*>(&::tidepool_cuStreamDestroy_v1)) &&
         ours("dlsym", reinterpret_cast<void*>(&::dlsym));
}

__attribute__((constructor)) void register_stream_probe() { runtime::set_interposition_probe(&stream_hooks_in_front); }

void created(CUresult result, const CUstream* stream) {
  if (result == CUDA_SUCCESS && stream != nullptr && serving()) runtime::Runtime::get().stream_created(*stream);
}

}  // namespace

}  // namespace tidepool::interpose

TIDEPOOL_HOOK CUresult cuStreamCreate(CUstream* stream, unsigned int flags) {
  auto real = TIDEPOOL_REAL_DRIVER(cuStreamCreate);
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult r = real(stream, flags);
  tidepool::interpose::created(r, stream);
  return r;
}

TIDEPOOL_HOOK CUresult cuStreamCreateWithPriority(CUstream* stream, unsigned int flags, int priority) {
  auto real = TIDEPOOL_REAL_DRIVER(cuStreamCreateWithPriority);
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult r = real(stream, flags, priority);
  tidepool::interpose::created(r, stream);
  return r;
}

TIDEPOOL_HOOK CUresult cuGreenCtxStreamCreate(CUstream* stream, CUgreenCtx green, unsigned int flags, int priority) {
  auto real = TIDEPOOL_REAL_DRIVER(cuGreenCtxStreamCreate);
  if (real == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  const CUresult r = real(stream, green, flags, priority);
  tidepool::interpose::created(r, stream);
  return r;
}

namespace tidepool::interpose {
namespace {

// Tells the runtime first: the stream must still exist to take a record.
CUresult destroy(CUstream stream, CUresult (*real)(CUstream)) {
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  const bool told = serving();
  if (told) runtime::Runtime::get().stream_destroying(stream);
  const CUresult r = real(stream);
  if (told && r != CUDA_SUCCESS) runtime::Runtime::get().stream_destroy_failed(stream);
  return r;
}

}  // namespace
}  // namespace tidepool::interpose

TIDEPOOL_HOOK CUresult cuStreamDestroy_v2(CUstream stream) {
  return tidepool::interpose::destroy(stream, TIDEPOOL_REAL_DRIVER(cuStreamDestroy_v2));
}

TIDEPOOL_HOOK CUresult tidepool_cuStreamDestroy_v1(CUstream stream) {
  static std::atomic<void*> slot{nullptr};
  auto real = tidepool::interpose::real_driver<CUresult (*)(CUstream)>("cuStreamDestroy", slot);
  // A driver without the old name: the current one does the same.
  return tidepool::interpose::destroy(stream, real != nullptr ? real : TIDEPOOL_REAL_DRIVER(cuStreamDestroy_v2));
}
