// Reservation: one contiguous range of device virtual addresses and the page
// map beneath it.
//
// With VMM, a reservation is cuMemAddressReserve'd VA whose pages (at the
// driver's granularity) are each backed by a physical allocation of one page,
// or by nothing. Without VMM it is a plain cuMemAlloc chunk, backed from birth
// to death. The page map records, per page, the physical page and where it
// lives. Invariant: a page with residency != unmapped has a physical page
// current at exactly that page's address, mapped there and readable/writable
// by the device. An unmapped page may still hold a parked mapping
// (physical_page.hpp): `physical` then names the page parked there.
#pragma once

#include <cuda.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "space/physical_page.hpp"

namespace tidepool::space {

// `host`: a host page (HostPage) is mapped here in place of a device page:
// the bytes were moved to the host (evicted) and the device reads them over
// PCIe until they come back. `broken`: mapped, but the access grant failed
// and so did the unmap; such a page backs nothing until an unmap succeeds.
enum class Residency : std::uint8_t { unmapped, device, host, broken };

// Work that may still use a mapping the pool stopped using: the pool's fence
// for it (a stream key and an epoch, opaque here). A page taken from under a
// free block whose earlier work is ordered before all later work (a device
// barrier) but not known finished stays mapped where it was, parked, with
// this; the mapping is unmapped only once the pool's UnmapCheck says the work
// is done (address_space.hpp).
struct PendingUse {
  std::uintptr_t key = 0;
  std::uint64_t epoch = 0;
  bool any = false;
};

struct PageEntry {
  PhysicalPage* physical = nullptr;           // current here, or parked here while unmapped
  HostPage* host = nullptr;                   // mapped here while residency == host
  Residency residency = Residency::unmapped;  // change only through Reservation::set_residency
  // Unmapped by the pool to back another range (not by a trim). The pool
  // reads it when it needs the page again: a sign its layout needs more
  // pages than it holds. Cleared when the page is mapped.
  bool reclaimed = false;
  // Set while parked here with work that may still reach the page through
  // this mapping; cleared when the mapping goes or becomes current again.
  PendingUse pending;
};

class Reservation {
 public:
  Reservation(std::uintptr_t base, std::size_t size, std::size_t page_size, bool backed_by_chunk)
      : base_(base),
        size_(size),
        page_size_(page_size),
        page_shift_(std::has_single_bit(page_size) ? std::countr_zero(page_size) : -1),
        chunk_(backed_by_chunk),
        pages_(size / page_size),
        mapped_words_((pages_.size() + 63) / 64),
        mapped_summary_((mapped_words_.size() + 63) / 64) {
    if (chunk_) {
      for (std::size_t p = 0; p < pages_.size(); ++p) set_residency(p, Residency::device);
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

  // A shift for the power-of-two page sizes every driver reports: a division
  // here would cost each allocation tens of cycles.
  [[nodiscard]] std::size_t page_of(std::uintptr_t address) const noexcept {
    return page_shift_ >= 0 ? (address - base_) >> page_shift_ : (address - base_) / page_size_;
  }
  [[nodiscard]] std::uintptr_t page_address(std::size_t page) const noexcept { return base_ + page * page_size_; }
  [[nodiscard]] const PageEntry& page(std::size_t index) const noexcept { return pages_[index]; }
  PageEntry& page(std::size_t index) noexcept { return pages_[index]; }
  // One past the highest page ever mapped: pages from here on are unmapped,
  // so scans of the page map can stop here.
  [[nodiscard]] std::size_t mapped_limit() const noexcept { return chunk_ ? pages_.size() : mapped_limit_; }

  // Keeps the bitmap of pages that are not unmapped in step with the map.
  void set_residency(std::size_t index, Residency residency) noexcept {
    if (pages_[index].residency == Residency::broken) --broken_pages_;
    if (residency == Residency::broken) ++broken_pages_;
    pages_[index].residency = residency;
    const std::uint64_t bit = std::uint64_t{1} << (index % 64);
    std::uint64_t& word = mapped_words_[index / 64];
    if (residency == Residency::unmapped) {
      word &= ~bit;
      if (word == 0) mapped_summary_[index / 4096] &= ~(std::uint64_t{1} << ((index / 64) % 64));
    } else {
      pages_[index].reclaimed = false;
      word |= bit;
      mapped_summary_[index / 4096] |= std::uint64_t{1} << ((index / 64) % 64);
      if (index + 1 > mapped_limit_) mapped_limit_ = index + 1;
    }
  }
  // The first page in [from, end) that is not unmapped, or `end`. Skips
  // unmapped runs 4096 pages at a time, so a reservation of a million pages
  // with a few mapped is scanned in a few hundred steps.
  [[nodiscard]] std::size_t next_mapped(std::size_t from, std::size_t end) const noexcept {
    const std::size_t limit = std::min(end, mapped_limit());
    if (from >= limit) return end;
    std::size_t word = from / 64;
    std::uint64_t bits = mapped_words_[word] & (~std::uint64_t{0} << (from % 64));
    if (bits == 0) {
      const std::size_t next_word = word + 1;
      std::size_t summary = next_word / 64;
      if (summary >= mapped_summary_.size()) return end;
      std::uint64_t live = mapped_summary_[summary] & (~std::uint64_t{0} << (next_word % 64));
      while (live == 0) {
        ++summary;
        if (summary >= mapped_summary_.size() || summary * 4096 >= limit) return end;
        live = mapped_summary_[summary];
      }
      word = summary * 64 + static_cast<std::size_t>(std::countr_zero(live));
      bits = mapped_words_[word];
    }
    const std::size_t found = word * 64 + static_cast<std::size_t>(std::countr_zero(bits));
    return found < limit ? found : end;
  }
  // Pages left broken (mapped, or mapped once, but never to be used again).
  [[nodiscard]] std::size_t broken_pages() const noexcept { return broken_pages_; }
  // How many pages in [from, end) are not unmapped.
  [[nodiscard]] std::size_t mapped_pages(std::size_t from, std::size_t end) const noexcept {
    if (from < end && from / 64 == (end - 1) / 64) {
      // Within one word of the bitmap, as a block on a few pages is, and
      // mostly all mapped: no bit count then (without -mpopcnt, a call).
      const std::size_t n = end - from;
      const std::uint64_t mask = n < 64 ? (std::uint64_t{1} << n) - 1 : ~std::uint64_t{0};
      const std::uint64_t bits = (mapped_words_[from / 64] >> (from % 64)) & mask;
      return bits == mask ? n : static_cast<std::size_t>(std::popcount(bits));
    }
    end = std::min(end, mapped_limit());
    std::size_t count = 0;
    for (std::size_t p = next_mapped(from, end); p < end;) {
      const std::size_t word = p / 64;
      const std::size_t word_end = std::min(end, (word + 1) * 64);
      std::uint64_t bits = mapped_words_[word] >> (p % 64);
      if (word_end - p < 64) bits &= (std::uint64_t{1} << (word_end - p)) - 1;
      count += static_cast<std::size_t>(std::popcount(bits));
      p = next_mapped(word_end, end);
    }
    return count;
  }
  // The pages lying wholly inside [address, address + length): [first, end),
  // empty when the range holds no whole page.
  [[nodiscard]] std::pair<std::size_t, std::size_t> whole_pages(std::uintptr_t address,
                                                                std::size_t length) const noexcept {
    const std::size_t first = (address - base_ + page_size_ - 1) / page_size_;
    const std::size_t end = (address + length - base_) / page_size_;
    return {first, std::max(first, end)};
  }
  // Pages overlapping [address, address + length) the pool unmapped to back
  // another range and has not mapped since (parked there or not).
  [[nodiscard]] std::size_t reclaimed_pages(std::uintptr_t address, std::size_t length) const noexcept {
    if (chunk_ || length == 0) return 0;
    std::size_t count = 0;
    for (std::size_t p = page_of(address); p <= page_of(address + length - 1); ++p)
      count += pages_[p].reclaimed ? 1 : 0;
    return count;
  }

  // Bytes of [address, address + length) on pages that are not unmapped
  // (on the device, on the host, or broken: any that holds a mapping):
  // whole pages by the bitmap, the two end pages, which the range may share
  // with its neighbours, by the part of them it covers.
  [[nodiscard]] std::uint64_t mapped_bytes(std::uintptr_t address, std::size_t length) const noexcept {
    if (chunk_ || length == 0) return length;
    const std::size_t first = page_of(address);
    const std::size_t last = page_of(address + length - 1);
    const auto part = [&](std::size_t p) -> std::uint64_t {
      if (pages_[p].residency == Residency::unmapped) return 0;
      const std::uintptr_t lo = std::max(page_address(p), address);
      const std::uintptr_t hi = std::min(page_address(p) + page_size_, address + length);
      return hi - lo;
    };
    std::uint64_t mapped = part(first);
    if (last > first) mapped += part(last);
    if (last > first + 1) mapped += std::uint64_t{mapped_pages(first + 1, last)} * page_size_;
    return mapped;
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
  int page_shift_;  // log2 of page_size_, or -1 when it is not a power of two
  bool chunk_;
  std::vector<PageEntry> pages_;
  std::vector<std::uint64_t> mapped_words_;    // bit p: page p is not unmapped
  std::vector<std::uint64_t> mapped_summary_;  // bit w: mapped_words_[w] != 0
  std::size_t mapped_limit_ = 0;
  std::size_t broken_pages_ = 0;
};

}  // namespace tidepool::space
