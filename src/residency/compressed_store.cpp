// See compressed_store.hpp.
#include "residency/compressed_store.hpp"

#include <algorithm>

namespace tidepool::residency {

util::Result<std::unique_ptr<CompressedStore>> CompressedStore::create(const driver::Driver& driver, CUcontext context,
                                                                       int device, HostCache& cache) {
  const driver::Api& api = driver.api();
  const std::size_t page_size = cache.page_size();
  const std::size_t capacity_pages = std::max<std::size_t>(1, cache.limit_bytes() / page_size);
  CUdeviceptr base = 0;
  driver::ScopedContext scope(api, context);
  if (auto s = driver::check(api.memAddressReserve(&base, capacity_pages * page_size, page_size, 0, 0),
                             "cuMemAddressReserve");
      !s) {
    return s;
  }
  return std::unique_ptr<CompressedStore>(new CompressedStore(driver, context, device, cache, base, capacity_pages));
}

CompressedStore::CompressedStore(const driver::Driver& driver, CUcontext context, int device, HostCache& cache,
                                 CUdeviceptr base, std::size_t capacity_pages)
    : api_(driver.api()),
      context_(context),
      device_(device),
      cache_(cache),
      base_(base),
      page_size_(cache.page_size()),
      capacity_pages_(capacity_pages) {}

CompressedStore::~CompressedStore() {
  driver::ScopedContext scope(api_, context_);
  for (std::size_t i = 0; i < pages_.size(); ++i) {
    (void)api_.memUnmap(base_ + i * page_size_, page_size_);
    cache_.give(pages_[i]);
  }
  (void)api_.memAddressFree(base_, capacity_pages_ * page_size_);
}

bool CompressedStore::grow() {
  if (pages_.size() >= capacity_pages_) return false;
  space::HostPage* page = cache_.take();
  if (page == nullptr) return false;
  const CUdeviceptr at = base_ + pages_.size() * page_size_;
  if (!map_for_device(api_, at, page_size_, page->handle, device_)) {
    cache_.give(page);
    return false;
  }
  pages_.push_back(page);
  free_bytes((pages_.size() - 1) * page_size_, page_size_);
  const std::uint64_t held = held_.fetch_add(page_size_, std::memory_order_relaxed) + page_size_;
  if (held > peak_held_.load(std::memory_order_relaxed)) peak_held_.store(held, std::memory_order_relaxed);
  return true;
}

void CompressedStore::shrink(std::size_t keep_pages) {
  while (!pages_.empty()) {
    const std::size_t top = pages_.size() * page_size_;
    auto last = free_.empty() ? free_.end() : std::prev(free_.end());
    if (last == free_.end() || last->first + last->second != top || last->second < (keep_pages + 1) * page_size_) {
      return;
    }
    const std::size_t page_start = top - page_size_;
    if (api_.memUnmap(base_ + page_start, page_size_) != CUDA_SUCCESS) return;
    cache_.give(pages_.back());
    pages_.pop_back();
    held_.fetch_sub(page_size_, std::memory_order_relaxed);
    if (last->first == page_start) {
      free_.erase(last);
    } else {
      last->second -= page_size_;
    }
  }
}

void CompressedStore::free_bytes(std::size_t offset, std::size_t length) {
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && offset + length == next->first) {
    length += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto previous = std::prev(next);
    if (previous->first + previous->second == offset) {
      previous->second += length;
      return;
    }
  }
  free_.emplace(offset, length);
}

void CompressedStore::note_use(std::int64_t delta) {
  const std::uint64_t used =
      used_.fetch_add(static_cast<std::uint64_t>(delta), std::memory_order_relaxed) + static_cast<std::uint64_t>(delta);
  if (delta > 0 && used > peak_used_.load(std::memory_order_relaxed)) {
    peak_used_.store(used, std::memory_order_relaxed);
  }
}

CUdeviceptr CompressedStore::take(std::size_t bytes) {
  const std::size_t length = rounded(bytes);
  if (length == 0) return 0;
  driver::ScopedContext scope(api_, context_);
  for (;;) {
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < length) continue;
      const std::size_t offset = it->first;
      const std::size_t left = it->second - length;
      free_.erase(it);
      if (left > 0) free_.emplace(offset + length, left);
      note_use(static_cast<std::int64_t>(length));
      return base_ + offset;
    }
    if (!grow()) {
      shrink(0);  // pages grown for this extent and not used go back
      return 0;
    }
  }
}

void CompressedStore::give(CUdeviceptr at, std::size_t bytes) {
  const std::size_t length = rounded(bytes);
  if (at == 0 || length == 0) return;
  free_bytes(static_cast<std::size_t>(at - base_), length);
  note_use(-static_cast<std::int64_t>(length));
  // Free pages at the top are kept up to a slack (a quarter of the bytes in
  // use), so that a store whose use goes up and down every step does not
  // map and unmap its top pages every time. No floor: a store in little use
  // (prefetch:learn, whose precopies stay raw) would hold pinned pages the
  // raw pages beside it cannot use.
  const std::size_t keep = used_.load(std::memory_order_relaxed) / 4 / page_size_;
  driver::ScopedContext scope(api_, context_);
  shrink(keep);
}

CompressedStoreStats CompressedStore::stats() const {
  CompressedStoreStats s;
  s.held_bytes = held_.load(std::memory_order_relaxed);
  s.peak_held_bytes = peak_held_.load(std::memory_order_relaxed);
  s.used_bytes = used_.load(std::memory_order_relaxed);
  s.peak_used_bytes = peak_used_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace tidepool::residency
