// Stream lifetime hooks: cuStreamCreate, cuStreamCreateWithPriority and
// cuStreamDestroy_v2 (cudart's stream calls reach these through
// cuGetProcAddress). They call the driver and tell the runtime, which keeps
// the registry that makes cudaFree-semantics fences cover every stream; the
// destroy is told before the driver destroys the stream, so the stream can
// still take a record.
//
// The probe below tells the runtime whether these hooks are what the process
// calls (they are under LD_PRELOAD, and in a program linked with libtidepool
// ahead of libcuda); only then is the registry known to be complete.
#include <cuda.h>
#include <dlfcn.h>

#include "hooks.hpp"
#include "real_symbols.hpp"
#include "route.hpp"
#include "runtime/runtime.hpp"

namespace tidepool::interpose {

namespace {

bool stream_hooks_in_front() {
  DlsymFn real = real_dlsym();
  if (real == nullptr) return false;
  return real(RTLD_DEFAULT, "cuStreamCreate") == reinterpret_cast<void*>(&::cuStreamCreate) &&
         real(RTLD_DEFAULT, "cuStreamCreateWithPriority") == reinterpret_cast<void*>(&::cuStreamCreateWithPriority) &&
         real(RTLD_DEFAULT, "cuStreamDestroy_v2") == reinterpret_cast<void*>(&::cuStreamDestroy_v2) &&
         real(RTLD_DEFAULT, "dlsym") == reinterpret_cast<void*>(&::dlsym);
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

TIDEPOOL_HOOK CUresult cuStreamDestroy_v2(CUstream stream) {
  auto real = TIDEPOOL_REAL_DRIVER(cuStreamDestroy_v2);
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  if (tidepool::interpose::serving()) tidepool::runtime::Runtime::get().stream_destroying(stream);
  return real(stream);
}
