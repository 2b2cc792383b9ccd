// Kernel-launch hooks: cuLaunchKernel, cuLaunchKernelEx,
// cuLaunchCooperativeKernel and their _ptsz forms. A cuLaunchKernelEx that
// may overlap the kernel ahead of it (programmatic stream serialization) is
// told to the runtime first. With eviction on, each launch's arguments go to the runtime first,
// which pins the pool blocks they point at until the launch is queued, marks
// them used and, under prefetch:launch or learn, brings their host pages
// back (submission.hpp); otherwise the launch goes straight to the driver.
// The runtime API's cudaLaunchKernel reaches the driver through
// cuGetProcAddress, where these same hooks are substituted.
#include <cuda.h>

#include "hooks.hpp"
#include "real_symbols.hpp"
#include "submission.hpp"

using tidepool::interpose::guarded_launch;
using tidepool::interpose::per_thread_default;

TIDEPOOL_HOOK CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                      unsigned bz, unsigned shared, CUstream stream, void** params, void** extra) {
  auto real = TIDEPOOL_REAL_DRIVER(cuLaunchKernel);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  return guarded_launch(f, params, extra, stream,
                        [&] { return real(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra); });
}

TIDEPOOL_HOOK CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                           unsigned by, unsigned bz, unsigned shared, CUstream stream, void** params,
                                           void** extra) {
  auto real = TIDEPOOL_REAL_DRIVER(cuLaunchKernel_ptsz);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  return guarded_launch(f, params, extra, per_thread_default(stream),
                        [&] { return real(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra); });
}

TIDEPOOL_HOOK CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                                 unsigned by, unsigned bz, unsigned shared, CUstream stream,
                                                 void** params) {
  auto real = TIDEPOOL_REAL_DRIVER(cuLaunchCooperativeKernel);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  return guarded_launch(f, params, nullptr, stream,
                        [&] { return real(f, gx, gy, gz, bx, by, bz, shared, stream, params); });
}

TIDEPOOL_HOOK CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                                      unsigned by, unsigned bz, unsigned shared, CUstream stream,
                                                      void** params) {
  auto real = TIDEPOOL_REAL_DRIVER(cuLaunchCooperativeKernel_ptsz);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  return guarded_launch(f, params, nullptr, per_thread_default(stream),
                        [&] { return real(f, gx, gy, gz, bx, by, bz, shared, stream, params); });
}

namespace {

// Whether the launch may begin before the kernel ahead of it has finished
// (programmatic dependent launch): the runtime hears of it first.
void note_overlap(const CUlaunchConfig* config) {
  for (unsigned i = 0; i < config->numAttrs && config->attrs != nullptr; ++i) {
    const CUlaunchAttribute& a = config->attrs[i];
    const bool overlaps =
        (a.id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION &&
         a.value.programmaticStreamSerializationAllowed != 0) ||
        (a.id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT && a.value.programmaticEvent.event != nullptr);
    if (overlaps && tidepool::interpose::serving()) {
      tidepool::runtime::Runtime::get().overlapping_launch();
      return;
    }
  }
}

}  // namespace

TIDEPOOL_HOOK CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  auto real = TIDEPOOL_REAL_DRIVER(cuLaunchKernelEx);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  if (config == nullptr) return real(config, f, params, extra);
  note_overlap(config);
  return guarded_launch(f, params, extra, config->hStream, [&] { return real(config, f, params, extra); });
}

TIDEPOOL_HOOK CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  auto real = TIDEPOOL_REAL_DRIVER(cuLaunchKernelEx_ptsz);
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  if (config == nullptr) return real(config, f, params, extra);
  note_overlap(config);
  return guarded_launch(f, params, extra, per_thread_default(config->hStream),
                        [&] { return real(config, f, params, extra); });
}
