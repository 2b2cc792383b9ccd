// CompressedStore: the pinned host memory that holds the streams of
// compressed evicted pages.
//
// It is made of host cache pages (so the cache's bound and its pinning
// ahead govern it too), each mapped a second time, in order, in a VA range
// of the store's own that the device may read and write: the store is one
// run of bytes, so streams lie end to end and one may cross from a page to
// the next. Extents are taken first fit (kAlign-aligned) from the lowest
// free bytes; the store grows a page at a time at its top and gives pages
// back to the cache once the bytes on and above them are free, beyond a
// slack (a quarter of the bytes in use) that spares a store whose use rises
// and falls every step from remapping its top pages each time.
//
// Used under the pool's lock, as the rest of the residency layer; stats()
// may be read from any thread.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "driver/driver.hpp"
#include "residency/host_cache.hpp"
#include "util/util.hpp"

namespace tidepool::residency {

struct CompressedStoreStats {
  std::uint64_t held_bytes = 0;  // host cache pages mapped in the store
  std::uint64_t used_bytes = 0;  // in extents handed out
  std::uint64_t peak_used_bytes = 0;
  std::uint64_t peak_held_bytes = 0;
};

class CompressedStore {
 public:
  static constexpr std::size_t kAlign = 256;

  static util::Result<std::unique_ptr<CompressedStore>> create(const driver::Driver& driver, CUcontext context,
                                                               int device, HostCache& cache);
  ~CompressedStore();
  CompressedStore(const CompressedStore&) = delete;
  CompressedStore& operator=(const CompressedStore&) = delete;

  // A device-accessible extent of at least `bytes`; 0 when the host cache
  // has no more pages for it.
  CUdeviceptr take(std::size_t bytes);
  // An extent take() gave, with the same `bytes`.
  void give(CUdeviceptr at, std::size_t bytes);
  [[nodiscard]] CompressedStoreStats stats() const;

 private:
  CompressedStore(const driver::Driver& driver, CUcontext context, int device, HostCache& cache, CUdeviceptr base,
                  std::size_t capacity_pages);
  [[nodiscard]] static std::size_t rounded(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
  bool grow();                                              // one more page at the top
  void shrink(std::size_t keep_pages);                      // wholly free pages at the top beyond `keep_pages` go back
  void free_bytes(std::size_t offset, std::size_t length);  // into free_, merged with its neighbours
  void note_use(std::int64_t delta);

  const driver::Api& api_;
  CUcontext context_;
  int device_;
  HostCache& cache_;
  CUdeviceptr base_;
  std::size_t page_size_;
  std::size_t capacity_pages_;
  std::vector<space::HostPage*> pages_;      // mapped at base_ + i * page_size_
  std::map<std::size_t, std::size_t> free_;  // free extents: offset -> length
  std::atomic<std::uint64_t> used_{0};
  std::atomic<std::uint64_t> peak_used_{0};
  std::atomic<std::uint64_t> held_{0};
  std::atomic<std::uint64_t> peak_held_{0};
};

}  // namespace tidepool::residency
