// CUDA IPC hooks: cuIpcGetMemHandle, cuIpcOpenMemHandle (both ABI names) and
// cuIpcCloseMemHandle; cudaIpcGetMemHandle and the rest reach them through
// the driver table. The driver's legacy IPC refuses the pool's VMM memory,
// so the runtime answers for pool blocks and tidepool handles
// (runtime/ipc_sharing.hpp) and everything else goes to the driver.
// Event handles pass through untouched.
#include <cuda.h>

#include <atomic>

#include "hooks.hpp"
#include "real_symbols.hpp"
#include "route.hpp"
#include "runtime/runtime.hpp"

namespace {

tidepool::runtime::IpcSharing* sharing() {
  return tidepool::interpose::serving() ? tidepool::runtime::Runtime::get().ipc() : nullptr;
}

}  // namespace

TIDEPOOL_HOOK CUresult cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr dptr) {
  if (auto* ipc = sharing(); ipc != nullptr) {
    if (auto answered = ipc->get_handle(handle, dptr)) return *answered;
  }
  return TIDEPOOL_CALL_REAL_DRIVER(cuIpcGetMemHandle, handle, dptr);
}

TIDEPOOL_HOOK CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* dptr, CUipcMemHandle handle, unsigned int flags) {
  if (auto* ipc = sharing(); ipc != nullptr) {
    if (auto answered = ipc->open(dptr, handle, flags)) return *answered;
  }
  return TIDEPOOL_CALL_REAL_DRIVER(cuIpcOpenMemHandle_v2, dptr, handle, flags);
}

TIDEPOOL_HOOK CUresult tidepool_cuIpcOpenMemHandle_v1(CUdeviceptr* dptr, CUipcMemHandle handle, unsigned int flags) {
  if (auto* ipc = sharing(); ipc != nullptr) {
    if (auto answered = ipc->open(dptr, handle, flags)) return *answered;
  }
  static std::atomic<void*> slot{nullptr};
  auto real = tidepool::interpose::real_driver<CUresult (*)(CUdeviceptr*, CUipcMemHandle, unsigned int)>(
      "cuIpcOpenMemHandle", slot);
  // A driver without the old name: the current one takes the same arguments.
  if (real == nullptr) real = TIDEPOOL_REAL_DRIVER(cuIpcOpenMemHandle_v2);
  return real == nullptr ? CUDA_ERROR_NOT_INITIALIZED : real(dptr, handle, flags);
}

TIDEPOOL_HOOK CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  if (auto* ipc = sharing(); ipc != nullptr) {
    if (auto answered = ipc->close(dptr)) return *answered;
  }
  return TIDEPOOL_CALL_REAL_DRIVER(cuIpcCloseMemHandle, dptr);
}
