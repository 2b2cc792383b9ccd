// IpcSharing: CUDA IPC on pool memory, for the hooks of cuIpcGetMemHandle,
// cuIpcOpenMemHandle and cuIpcCloseMemHandle.
//
// The driver's legacy IPC refuses VMM memory, so a pool block travels as a
// tidepool handle (ipc_wire.hpp): IpcExporter answers for this process's
// blocks, IpcImporter maps other processes' blocks. Everything else is the
// driver's: an address outside the pool gets the driver's handle, a handle
// not tidepool's is opened by the driver, and so on. Both processes must run
// tidepool (the preload): a driver alone cannot open a tidepool handle.
// Event handles (cuIpcGetEventHandle) are the driver's alone.
//
// Thread-safe.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "driver/driver.hpp"
#include "runtime/ipc_exporter.hpp"
#include "runtime/ipc_importer.hpp"

namespace tidepool::runtime {

class Allocator;

class IpcSharing {
 public:
  // `segment_owner`: the allocator whose pool's segments hold an address, or null.
  using OwnerLookup = std::function<Allocator*(std::uintptr_t)>;
  IpcSharing(const driver::Driver& driver, OwnerLookup segment_owner)
      : segment_owner_(std::move(segment_owner)), exporter_(driver.api()), importer_(driver) {}

  // Each answers as the driver's call would, or nullopt when the call is
  // the driver's to answer (not a pool address, not a tidepool handle, not
  // a pointer opened here).
  std::optional<CUresult> get_handle(CUipcMemHandle* handle, CUdeviceptr address);
  std::optional<CUresult> open(CUdeviceptr* out, const CUipcMemHandle& handle, unsigned flags);
  std::optional<CUresult> close(CUdeviceptr pointer);

  [[nodiscard]] IpcExporter::Counters exports() const { return exporter_.counters(); }

 private:
  OwnerLookup segment_owner_;
  IpcExporter exporter_;
  IpcImporter importer_;
};

}  // namespace tidepool::runtime
