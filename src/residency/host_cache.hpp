// HostCache: the pinned host pages that evicted device pages move to.
//
// Each page is a host-located physical allocation (cuMemCreate with
// CU_MEM_LOCATION_TYPE_HOST_NUMA, or HOST), one device page in size, kept
// mapped at a staging address in a VA range of the cache's own and
// accessible to the device, so that copies reach it and the space layer can
// map it at a pool address in place of a device page.
//
// Pinning costs about a second per GB and can stall the device, so it never
// happens on an allocating thread once the cache has seen its working set: a
// background thread pins ahead of need and pages are reused, never unpinned
// while the cache stands. What it holds stays within 1.1 times the peak of
// pages in use (the peak evicted bytes): the thread pins only up to a
// headroom of a tenth of that peak. Before the first peak is known (the
// first evictions) a page may be pinned on the evicting thread; those are
// counted as `sync_pins`.
//
// Bounded by `limit_bytes` (TIDEPOOL_CONF's host_cache): take() returns null
// once that many bytes are in use. Thread-safe.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "driver/driver.hpp"
#include "space/space.hpp"
#include "util/util.hpp"

namespace tidepool::residency {

struct HostCacheStats {
  std::uint64_t held_bytes = 0;  // pinned: in use + free
  std::uint64_t peak_held_bytes = 0;
  std::uint64_t in_use_bytes = 0;  // backing evicted pages now
  std::uint64_t peak_in_use_bytes = 0;
  std::uint64_t pin_calls = 0;  // host pages created (cuMemCreate on the host)
  std::uint64_t sync_pins = 0;  // of those, pinned on an evicting thread
  double sync_pin_ms = 0;       // the evicting threads' time in those pins
};

class HostCache {
 public:
  // Probes host-located VMM (the device attributes, then a trial page: the
  // attributes are unreliable on some 12.x drivers). Fails with
  // not_supported and the reason when eviction cannot work on this device.
  static util::Result<std::unique_ptr<HostCache>> create(const driver::Driver& driver, CUcontext context,
                                                         const driver::Capabilities& caps, std::size_t page_size,
                                                         std::size_t limit_bytes);
  ~HostCache();
  HostCache(const HostCache&) = delete;
  HostCache& operator=(const HostCache&) = delete;

  // A free page, pinned now if none is free (null when the limit is reached
  // or pinning fails). The page is the caller's until give().
  space::HostPage* take();
  void give(space::HostPage* page);
  [[nodiscard]] std::size_t page_size() const noexcept { return page_size_; }
  [[nodiscard]] std::size_t limit_bytes() const noexcept { return limit_pages_ * page_size_; }
  [[nodiscard]] HostCacheStats stats() const;
  // stats(), unless the lock is still held at `deadline` (false; the exit path).
  bool try_stats(std::chrono::steady_clock::time_point deadline, HostCacheStats* out) const;

 private:
  HostCache(const driver::Driver& driver, CUcontext context, const driver::Capabilities& caps, std::size_t page_size,
            std::size_t limit_pages, CUdeviceptr staging_base);
  // Creates one page at staging slot `slot`; null on failure.
  space::HostPage* pin(std::size_t slot);
  void unpin(space::HostPage* page);
  void pin_ahead();
  [[nodiscard]] std::size_t headroom_pages() const;  // locked
  [[nodiscard]] HostCacheStats stats_locked() const;

  const driver::Api& api_;
  CUcontext context_;
  CUmemAllocationProp prop_{};
  int device_;
  std::size_t page_size_;
  std::size_t limit_pages_;
  CUdeviceptr staging_base_;

  mutable std::mutex lock_;
  std::condition_variable wake_;
  std::vector<std::unique_ptr<space::HostPage>> pages_;  // every page pinned, by staging slot
  std::vector<space::HostPage*> free_;
  std::vector<std::size_t> free_slots_;  // staging slots with no page
  std::size_t in_use_ = 0;
  std::size_t peak_in_use_ = 0;
  std::size_t peak_held_ = 0;
  std::uint64_t pin_calls_ = 0;
  double sync_pin_ms_ = 0;
  std::uint64_t sync_pins_ = 0;
  std::size_t pinning_ = 0;  // slots the thread is pinning now (counted as held)
  bool stopping_ = false;
  std::thread thread_;
};

// The default bound: half the host's physical memory.
std::size_t default_host_cache_bytes();

// Maps `handle` at [at, at + bytes) for `device` to read and write; false,
// with nothing left mapped there, when either call fails.
bool map_for_device(const driver::Api& api, CUdeviceptr at, std::size_t bytes, CUmemGenericAllocationHandle handle,
                    int device);

}  // namespace tidepool::residency
