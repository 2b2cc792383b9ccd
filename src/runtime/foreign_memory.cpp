// See foreign_memory.hpp.
#include "runtime/foreign_memory.hpp"

#include <algorithm>

namespace tidepool::runtime {

void ForeignMemory::created(CUmemGenericAllocationHandle handle, int device, std::size_t bytes, std::uint16_t tag) {
  if (device < 0 || device >= kMaxDevices || bytes == 0) return;
  const auto d = static_cast<std::size_t>(device);
  std::lock_guard<std::mutex> guard(lock_);
  if (!held_.emplace(handle, Held{device, bytes, tag}).second) return;  // a handle the driver handed out twice: never
  add(d, bytes, tag);
}

void ForeignMemory::allocated(std::uintptr_t address, int device, std::size_t bytes, std::uint16_t tag) {
  if (device < 0 || device >= kMaxDevices || bytes == 0 || address == 0) return;
  std::lock_guard<std::mutex> guard(lock_);
  if (!allocations_.emplace(address, Held{device, bytes, tag}).second) return;
  allocation_count_.store(allocations_.size(), std::memory_order_release);
  add(static_cast<std::size_t>(device), bytes, tag);
}

void ForeignMemory::freed(std::uintptr_t address) {
  if (allocation_count_.load(std::memory_order_acquire) == 0) return;
  std::lock_guard<std::mutex> guard(lock_);
  auto it = allocations_.find(address);
  if (it == allocations_.end()) return;
  remove(static_cast<std::size_t>(it->second.device), it->second.bytes, it->second.tag);
  allocations_.erase(it);
  allocation_count_.store(allocations_.size(), std::memory_order_release);
}

void ForeignMemory::add(std::size_t device, std::size_t bytes, std::uint16_t tag) {
  const std::size_t now = bytes_[device].load(std::memory_order_relaxed) + bytes;
  bytes_[device].store(now, std::memory_order_release);
  peak_[device] = std::max(peak_[device], now);
  auto& [tag_now, tag_peak] = by_tag_[device][tag];
  tag_now += bytes;
  tag_peak = std::max(tag_peak, tag_now);
}

void ForeignMemory::remove(std::size_t device, std::size_t bytes, std::uint16_t tag) {
  bytes_[device].store(bytes_[device].load(std::memory_order_relaxed) - bytes, std::memory_order_release);
  by_tag_[device][tag].first -= bytes;
}

void ForeignMemory::released(CUmemGenericAllocationHandle handle) {
  std::lock_guard<std::mutex> guard(lock_);
  auto it = held_.find(handle);
  if (it == held_.end()) return;
  it->second.released = true;
  forget_if_unheld(it);
}

void ForeignMemory::mapped(std::uintptr_t address, std::size_t bytes, CUmemGenericAllocationHandle handle) {
  std::lock_guard<std::mutex> guard(lock_);
  auto it = held_.find(handle);
  if (it == held_.end()) return;
  if (mappings_.emplace(address, std::make_pair(bytes, handle)).second) it->second.mappings++;
}

void ForeignMemory::unmapped(std::uintptr_t address, std::size_t bytes) {
  std::lock_guard<std::mutex> guard(lock_);
  for (auto m = mappings_.lower_bound(address); m != mappings_.end() && m->first < address + bytes;) {
    auto it = held_.find(m->second.second);
    m = mappings_.erase(m);
    if (it == held_.end()) continue;
    if (it->second.mappings > 0) it->second.mappings--;
    forget_if_unheld(it);
  }
}

void ForeignMemory::forget_if_unheld(std::unordered_map<CUmemGenericAllocationHandle, Held>::iterator it) {
  if (!it->second.released || it->second.mappings > 0) return;
  remove(static_cast<std::size_t>(it->second.device), it->second.bytes, it->second.tag);
  held_.erase(it);
}

ForeignMemory::DeviceFigures ForeignMemory::figures(int device) const {
  DeviceFigures f;
  if (device < 0 || device >= kMaxDevices) return f;
  const auto d = static_cast<std::size_t>(device);
  std::lock_guard<std::mutex> guard(lock_);
  f.bytes = bytes_[d].load(std::memory_order_relaxed);
  f.peak_bytes = peak_[d];
  for (const auto& [tag, counts] : by_tag_[d]) f.by_tag.push_back({tag, counts.first, counts.second});
  std::sort(f.by_tag.begin(), f.by_tag.end(), [](const ByTag& a, const ByTag& b) {
    return a.peak_bytes != b.peak_bytes ? a.peak_bytes > b.peak_bytes : a.tag < b.tag;
  });
  return f;
}

}  // namespace tidepool::runtime
