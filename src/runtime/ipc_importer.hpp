// IpcImporter: pool blocks of other processes this process has opened
// (cuIpcOpenMemHandle on a tidepool handle, ipc_wire.hpp).
//
// An open asks the exporting process over its socket, and maps what comes
// back at a new address: the block's pages, imported from their file
// descriptors (cuMemImportFromShareableHandle) and mapped for the device of
// the calling thread's context, or, for a pool without VMM, the chunk through
// the driver's own IPC. The pointer returned is the block's start, as the
// driver's is the allocation's. Opening the same handle again returns the
// same pointer, counted; the last close unmaps and tells the exporter, which
// lets go of the block. Each open keeps its own connection to the
// exporter: if this process dies, its end tells the exporter to let go.
//
// Thread-safe: opens and closes are rare, and one lock serialises them,
// the exchanges with exporters included (an exporter never calls back).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "driver/driver.hpp"
#include "runtime/ipc_wire.hpp"

namespace tidepool::runtime {

class IpcImporter {
 public:
  explicit IpcImporter(const driver::Driver& driver) : api_(driver.api()) {}
  ~IpcImporter();
  IpcImporter(const IpcImporter&) = delete;
  IpcImporter& operator=(const IpcImporter&) = delete;

  // Maps the block `handle` names; a CUresult as cuIpcOpenMemHandle's.
  CUresult open(const ipc::Handle& handle, unsigned flags, CUdeviceptr* out);
  // Whether `pointer` is one open() returned (else the driver's).
  [[nodiscard]] bool imported(CUdeviceptr pointer) const;
  // Unmaps it once every open of it is closed; a CUresult as cuIpcCloseMemHandle's.
  CUresult close(CUdeviceptr pointer);

 private:
  struct Import {
    std::uint64_t channel = 0;
    std::uint64_t export_id = 0;
    std::uint64_t secret[2] = {0, 0};
    CUdeviceptr reserved = 0;  // the VA holding the pages (0 for a chunk)
    std::size_t reserved_bytes = 0;
    std::size_t mapped_bytes = 0;  // from `reserved` on
    CUdeviceptr chunk = 0;         // the chunk the driver mapped (chunks only)
    std::size_t opens = 0;
    int socket = -1;  // the open's own connection: the exporter holds the block while it lasts
  };
  struct Key {
    std::uint64_t channel;
    std::uint64_t export_id;
    friend bool operator<(const Key& a, const Key& b) {
      return a.channel != b.channel ? a.channel < b.channel : a.export_id < b.export_id;
    }
  };

  // A connection to `channel`'s exporter, checked and with bounded waits;
  // -1 when it cannot be made.
  static int connect(std::uint64_t channel);
  // Receives the pages of a reply a batch at a time and maps them for the
  // current context's device.
  CUresult map_pages(const ipc::Reply& reply, int socket, Import* import, CUdeviceptr* out);
  void unmap(const Import& import);
  // Tells the exporter (and waits for its word) and ends the connection.
  static void tell_closed(const Import& import);

  const driver::Api& api_;
  mutable std::mutex lock_;
  std::map<Key, Import> imports_;
  std::unordered_map<CUdeviceptr, Key> by_pointer_;
};

}  // namespace tidepool::runtime
