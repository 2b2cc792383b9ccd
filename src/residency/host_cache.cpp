// See host_cache.hpp.
#include "residency/host_cache.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "util/util.hpp"

namespace tidepool::residency {

std::size_t default_host_cache_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return std::size_t{8} << 30;
  return static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) / 2;
}

util::Result<std::unique_ptr<HostCache>> HostCache::create(const driver::Driver& driver, CUcontext context,
                                                           const driver::Capabilities& caps, std::size_t page_size,
                                                           std::size_t limit_bytes) {
  const driver::Api& api = driver.api();
  if (!caps.vmm) return util::Status(util::Error::not_supported, "the device has no virtual memory management");
  if (!caps.host_vmm && !caps.host_numa_vmm) {
    return util::Status(util::Error::not_supported,
                        "the device reports no host-located VMM memory (CUDA 12.2+, CU_MEM_LOCATION_TYPE_HOST)");
  }
  if (api.memCreate == nullptr || api.memAddressReserve == nullptr || api.memcpyDtoDAsync == nullptr) {
    return util::Status(util::Error::not_supported, "the driver lacks the VMM or copy entry points eviction needs");
  }
  const std::size_t limit_pages = page_size == 0 ? 0 : limit_bytes / page_size;
  if (limit_pages == 0) return util::Status(util::Error::bad_config, "host_cache is smaller than one page");
  driver::ScopedContext scope(api, context);
  CUdeviceptr base = 0;
  if (auto s = driver::check(api.memAddressReserve(&base, limit_pages * page_size, page_size, 0, 0),
                             "cuMemAddressReserve (host cache)");
      !s) {
    return s;
  }
  std::unique_ptr<HostCache> cache(new HostCache(driver, context, caps, page_size, limit_pages, base));
  // The attribute alone is not trusted: one page is pinned, mapped and made
  // device-accessible, then given back, so that nothing stays pinned before
  // the first eviction.
  const std::size_t trial_slot = cache->free_slots_.back();
  cache->free_slots_.pop_back();
  space::HostPage* trial = cache->pin(trial_slot);
  if (trial == nullptr) {
    return util::Status(util::Error::not_supported,
                        "a trial host-located page could not be created, mapped and made device-accessible");
  }
  cache->unpin(trial);
  cache->pin_calls_ = 0;
  cache->thread_ = util::start_background_thread([c = cache.get()] { c->pin_ahead(); });
  return cache;
}

HostCache::HostCache(const driver::Driver& driver, CUcontext context, const driver::Capabilities& caps,
                     std::size_t page_size, std::size_t limit_pages, CUdeviceptr staging_base)
    : api_(driver.api()),
      context_(context),
      device_(caps.device),
      page_size_(page_size),
      limit_pages_(limit_pages),
      staging_base_(staging_base) {
  prop_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  if (caps.host_numa_vmm && caps.host_numa_id >= 0) {
    prop_.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
    prop_.location.id = caps.host_numa_id;
  } else {
    prop_.location.type = CU_MEM_LOCATION_TYPE_HOST;
    prop_.location.id = 0;
  }
  pages_.resize(limit_pages_);
  free_slots_.reserve(limit_pages_);
  for (std::size_t slot = limit_pages_; slot > 0; --slot) free_slots_.push_back(slot - 1);
}

HostCache::~HostCache() {
  {
    std::lock_guard<std::mutex> guard(lock_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  driver::ScopedContext scope(api_, context_);
  for (auto& page : pages_) {
    if (page) unpin(page.get());
  }
  if (api_.memAddressFree != nullptr) (void)api_.memAddressFree(staging_base_, limit_pages_ * page_size_);
}

bool map_for_device(const driver::Api& api, CUdeviceptr at, std::size_t bytes, CUmemGenericAllocationHandle handle,
                    int device) {
  if (api.memMap(at, bytes, 0, handle, 0) != CUDA_SUCCESS) return false;
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (api.memSetAccess(at, bytes, &access, 1) == CUDA_SUCCESS) return true;
  (void)api.memUnmap(at, bytes);
  return false;
}

space::HostPage* HostCache::pin(std::size_t slot) {
  const CUdeviceptr at = staging_base_ + slot * page_size_;
  CUmemGenericAllocationHandle handle = 0;
  if (api_.memCreate(&handle, page_size_, &prop_, 0) != CUDA_SUCCESS) return nullptr;
  if (!map_for_device(api_, at, page_size_, handle, device_)) {
    (void)api_.memRelease(handle);
    return nullptr;
  }
  auto page = std::make_unique<space::HostPage>();
  page->handle = handle;
  page->staging = at;
  std::lock_guard<std::mutex> guard(lock_);
  pin_calls_++;
  pages_[slot] = std::move(page);
  return pages_[slot].get();
}

void HostCache::unpin(space::HostPage* page) {
  const std::size_t slot = (page->staging - staging_base_) / page_size_;
  (void)api_.memUnmap(page->staging, page_size_);
  (void)api_.memRelease(page->handle);
  std::lock_guard<std::mutex> guard(lock_);
  pages_[slot].reset();  // the page itself
  free_slots_.push_back(slot);
}

std::size_t HostCache::headroom_pages() const { return peak_in_use_ / 10; }

space::HostPage* HostCache::take() {
  std::unique_lock<std::mutex> guard(lock_);
  if (!free_.empty()) {
    space::HostPage* page = free_.back();
    free_.pop_back();
    in_use_++;
    peak_in_use_ = std::max(peak_in_use_, in_use_);
    if (free_.size() < headroom_pages()) wake_.notify_all();
    return page;
  }
  // The thread may be pinning the last slots: their pages are the cache's
  // to hand out, so wait for them rather than call the cache full.
  wake_.wait(guard, [&] { return !free_.empty() || !free_slots_.empty() || pinning_ == 0; });
  if (!free_.empty()) {
    space::HostPage* page = free_.back();
    free_.pop_back();
    in_use_++;
    peak_in_use_ = std::max(peak_in_use_, in_use_);
    return page;
  }
  if (free_slots_.empty()) return nullptr;  // the limit: every slot holds a page in use
  const std::size_t slot = free_slots_.back();
  free_slots_.pop_back();
  guard.unlock();
  double pin_ms = 0;
  space::HostPage* page = nullptr;
  {
    const util::HostTime pinning(&pin_ms);
    page = pin(slot);
  }
  guard.lock();
  sync_pin_ms_ += pin_ms;
  if (page == nullptr) {
    free_slots_.push_back(slot);
    return nullptr;
  }
  sync_pins_++;
  in_use_++;
  peak_in_use_ = std::max(peak_in_use_, in_use_);
  peak_held_ = std::max(peak_held_, limit_pages_ - free_slots_.size());
  if (free_.size() < headroom_pages()) wake_.notify_all();
  return page;
}

void HostCache::give(space::HostPage* page) {
  if (page == nullptr) return;
  std::lock_guard<std::mutex> guard(lock_);
  page->current = {};
  free_.push_back(page);
  in_use_--;
}

void HostCache::pin_ahead() {
  driver::ScopedContext scope(api_, context_);
  std::unique_lock<std::mutex> guard(lock_);
  for (;;) {
    // Held never passes 1.1 times the peak in use: the headroom is a tenth
    // of that peak, and only free pages count towards it.
    wake_.wait(guard, [&] { return stopping_ || (free_.size() < headroom_pages() && !free_slots_.empty()); });
    if (stopping_) return;
    const std::size_t slot = free_slots_.back();
    free_slots_.pop_back();
    pinning_++;
    guard.unlock();
    space::HostPage* page = pin(slot);
    guard.lock();
    pinning_--;
    wake_.notify_all();  // a take() may wait for this page
    if (page == nullptr) {
      free_slots_.push_back(slot);
      // Pinning failed (the host is short): try again later rather than in
      // a loop; the evicting thread pins for itself meanwhile.
      wake_.wait_for(guard, std::chrono::milliseconds(100), [&] { return stopping_; });
      continue;
    }
    free_.push_back(page);
    peak_held_ = std::max(peak_held_, limit_pages_ - free_slots_.size());
  }
}

HostCacheStats HostCache::stats() const {
  std::lock_guard<std::mutex> guard(lock_);
  return stats_locked();
}

bool HostCache::try_stats(std::chrono::steady_clock::time_point deadline, HostCacheStats* out) const {
  std::unique_lock<std::mutex> guard(lock_, std::defer_lock);
  if (!util::try_lock_until(guard, deadline)) return false;
  *out = stats_locked();
  return true;
}

HostCacheStats HostCache::stats_locked() const {
  HostCacheStats s;
  s.held_bytes = (limit_pages_ - free_slots_.size()) * page_size_;
  s.peak_held_bytes = peak_held_ * page_size_;
  s.in_use_bytes = in_use_ * page_size_;
  s.peak_in_use_bytes = peak_in_use_ * page_size_;
  s.pin_calls = pin_calls_;
  s.sync_pins = sync_pins_;
  s.sync_pin_ms = sync_pin_ms_;
  return s;
}

}  // namespace tidepool::residency
