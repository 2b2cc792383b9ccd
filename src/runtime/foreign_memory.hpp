// ForeignMemory: device memory the process holds outside every pool, made
// by the program or its libraries through the driver's VMM calls (NCCL's
// buffers, cuBLAS workspaces: cuMemCreate on a device), or allocations the
// driver served rather than tidepool (from a memory pool of the program's
// own: cuMemAllocAsync while it is current, cuMemAllocFromPoolAsync). The
// preload's hooks report each creation, map, unmap and release, and each
// such allocation and its free; each device's total
// counts against its budget (the AddressSpace reads it as bytes held outside
// the pool), so the budget is what the process holds. By caller tag
// (CallSites), for the report's libraries. Thread-safe; never on an
// allocation's hot path.
//
// The driver frees such memory only when its handle is released and no
// mapping of it is left: releasing a handle right after mapping it is the
// usual pattern, and the memory is held until the unmap. So is the count.
// (A handle retained again with cuMemRetainAllocationHandle is not
// followed: its extra release is taken as the creator's.)
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace tidepool::runtime {

class ForeignMemory {
 public:
  static constexpr int kMaxDevices = 64;

  // Counts bytes that `handle` holds on `device` (a caller tag: who made it).
  void created(CUmemGenericAllocationHandle handle, int device, std::size_t bytes, std::uint16_t tag);
  // cuMemRelease of `handle`: stops counting it once nothing holds it.
  void released(CUmemGenericAllocationHandle handle);
  // The program mapped (part of) a counted handle at [address, address + bytes).
  void mapped(std::uintptr_t address, std::size_t bytes, CUmemGenericAllocationHandle handle);
  // The program unmapped [address, address + bytes): the mappings inside go.
  void unmapped(std::uintptr_t address, std::size_t bytes);

  // An allocation of `bytes` on `device` the driver served (counted while
  // it lives: a pool's cached bytes beyond it are the driver's to report).
  void allocated(std::uintptr_t address, int device, std::size_t bytes, std::uint16_t tag);
  // A free the driver accepted: stops counting `address` if it was one.
  void freed(std::uintptr_t address);

  // The bytes held now on `device`; what AddressSpace reads as held outside.
  [[nodiscard]] const std::atomic<std::size_t>* bytes_now(int device) const noexcept {
    return device >= 0 && device < kMaxDevices ? &bytes_[static_cast<std::size_t>(device)] : nullptr;
  }

  struct ByTag {
    std::uint16_t tag = 0;
    std::size_t bytes = 0;
    std::size_t peak_bytes = 0;
  };
  struct DeviceFigures {
    std::size_t bytes = 0;
    std::size_t peak_bytes = 0;
    std::vector<ByTag> by_tag;  // every tag that ever held some, heaviest peak first
  };
  [[nodiscard]] DeviceFigures figures(int device) const;

 private:
  struct Held {
    int device;
    std::size_t bytes;
    std::uint16_t tag;
    bool released = false;
    std::size_t mappings = 0;
  };
  // Stops counting `it` if nothing holds it any more. Locked.
  void forget_if_unheld(std::unordered_map<CUmemGenericAllocationHandle, Held>::iterator it);
  // The counts of `device` and its tag grow or shrink by `bytes`. Locked.
  void add(std::size_t device, std::size_t bytes, std::uint16_t tag);
  void remove(std::size_t device, std::size_t bytes, std::uint16_t tag);
  mutable std::mutex lock_;
  std::unordered_map<CUmemGenericAllocationHandle, Held> held_;
  std::map<std::uintptr_t, std::pair<std::size_t, CUmemGenericAllocationHandle>> mappings_;  // by address
  std::unordered_map<std::uintptr_t, Held> allocations_;  // the driver's allocations, by address
  // allocations_.size(), read without the lock: a free forwarded to the
  // driver while there are none pays one load.
  std::atomic<std::size_t> allocation_count_{0};
  std::array<std::atomic<std::size_t>, kMaxDevices> bytes_{};
  std::array<std::size_t, kMaxDevices> peak_{};
  // By device, then tag: (now, peak).
  std::array<std::unordered_map<std::uint16_t, std::pair<std::size_t, std::size_t>>, kMaxDevices> by_tag_;
};

}  // namespace tidepool::runtime
