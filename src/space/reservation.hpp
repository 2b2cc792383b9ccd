// Reservation: one contiguous range of device virtual addresses and the page
// map beneath it.
//
// With VMM, a reservation is cuMemAddressReserve'd VA whose pages (at the
// driver's granularity) are each backed by a physical allocation of one page,
// or by nothing. Without VMM it is a plain cuMemAlloc chunk, backed from birth
// to death. The page map records, per page, the physical handle and where the
// page lives. Invariant: a page with residency != unmapped has a handle that
// is mapped at exactly that page's address and readable/writable by the device.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tidepool::space {

// `broken`: mapped, but the access grant failed and so did the unmap; such a
// page backs nothing until an unmap succeeds.
enum class Residency : std::uint8_t { unmapped, device, host, broken };

struct PageEntry {
  CUmemGenericAllocationHandle handle = 0;
  Residency residency = Residency::unmapped;
};

class Reservation {
 public:
  Reservation(std::uintptr_t base, std::size_t size, std::size_t page_size, bool backed_by_chunk)
      : base_(base), size_(size), page_size_(page_size), chunk_(backed_by_chunk), pages_(size / page_size) {
    if (chunk_) {
      for (PageEntry& p : pages_) p.residency = Residency::device;
    }
  }

  [[nodiscard]] std::uintptr_t base() const noexcept { return base_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::uintptr_t end() const noexcept { return base_ + size_; }
  [[nodiscard]] std::size_t page_size() const noexcept { return page_size_; }
  [[nodiscard]] std::size_t page_count() const noexcept { return pages_.size(); }
  // A cuMemAlloc chunk (no VMM): always fully backed, never remapped.
  [[nodiscard]] bool is_chunk() const noexcept { return chunk_; }
  [[nodiscard]] bool contains(std::uintptr_t address) const noexcept {
    return address >= base_ && address < base_ + size_;
  }

  [[nodiscard]] std::size_t page_of(std::uintptr_t address) const noexcept { return (address - base_) / page_size_; }
  [[nodiscard]] std::uintptr_t page_address(std::size_t page) const noexcept { return base_ + page * page_size_; }
  [[nodiscard]] const PageEntry& page(std::size_t index) const noexcept { return pages_[index]; }
  PageEntry& page(std::size_t index) noexcept { return pages_[index]; }
  // One past the highest page ever mapped: pages from here on are unmapped,
  // so scans of the page map can stop here.
  [[nodiscard]] std::size_t mapped_limit() const noexcept { return chunk_ ? pages_.size() : mapped_limit_; }
  void note_mapped(std::size_t index) noexcept {
    if (index + 1 > mapped_limit_) mapped_limit_ = index + 1;
  }

  // True when every page overlapping [address, address + length) is mapped.
  [[nodiscard]] bool is_backed(std::uintptr_t address, std::size_t length) const noexcept {
    if (chunk_ || length == 0) return true;
    const std::size_t first = page_of(address);
    const std::size_t last = page_of(address + length - 1);
    if (last >= mapped_limit_) return false;
    for (std::size_t p = first; p <= last; ++p) {
      if (pages_[p].residency == Residency::unmapped || pages_[p].residency == Residency::broken) return false;
    }
    return true;
  }

 private:
  std::uintptr_t base_;
  std::size_t size_;
  std::size_t page_size_;
  bool chunk_;
  std::vector<PageEntry> pages_;
  std::size_t mapped_limit_ = 0;
};

}  // namespace tidepool::space
