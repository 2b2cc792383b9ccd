// PhysicalPage: one physical page (a cuMemCreate handle of one page) and
// the virtual pages it is mapped at.
//
// A page is current at one virtual page at most: the pool uses it there. A
// page current nowhere is spare. It may also stay mapped, parked, at up to
// kMaxParked other virtual pages that the pool treats as unmapped: stitching
// moved it away from them and left the old mapping in place rather than pay
// a cuMemUnmap. When a range comes back to a parked virtual page while that
// page is spare, making it current there again costs no driver call. A
// training loop that moves the same pages between the same places every
// step therefore stops calling the driver after the step that first moved
// them.
//
// Invariant: nothing is ever placed on a parked virtual page (the page map
// says unmapped), so a page's bytes are reachable only through the one
// virtual page it is current at, except through a dangling pointer and,
// until it finishes, work queued before the page moved that the mapping's
// PendingUse names (reservation.hpp): all work queued since runs after it.
#pragma once

#include <cuda.h>

#include <array>
#include <cstddef>
#include <cstdint>

namespace tidepool::space {

class Reservation;

struct PageLocation {
  Reservation* reservation = nullptr;  // null: nowhere
  std::size_t page = 0;
  friend bool operator==(const PageLocation&, const PageLocation&) = default;
};

struct PhysicalPage {
  // Each parked mapping is a driver mapping held; three lets a page serve
  // four places in turn, which covers a layout that rotates pages through
  // a few ranges per step.
  static constexpr std::size_t kMaxParked = 3;

  CUmemGenericAllocationHandle handle = 0;
  PageLocation current;  // where the pool uses it; nowhere while spare
  std::array<PageLocation, kMaxParked> parked{};
  std::uint8_t parked_count = 0;
  std::size_t slot = 0;               // index in AddressSpace's list of pages
  std::size_t spare_slot = SIZE_MAX;  // index in the spare list, SIZE_MAX while current
  [[nodiscard]] bool is_spare() const noexcept { return spare_slot != SIZE_MAX; }
};

// HostPage: one host-located physical page (cuMemCreate with a host
// location: pinned host memory the device reaches over PCIe). The residency
// layer owns and creates them (its host cache keeps each mapped at a
// `staging` address of its own, which copies use); the space maps one at a
// pool address in place of a device page to evict that page, so the
// device pointer stays valid.
struct HostPage {
  CUmemGenericAllocationHandle handle = 0;
  std::uintptr_t staging = 0;  // where the host cache keeps it mapped, device-accessible
  PageLocation current;        // the pool page it backs; nowhere while in the cache
  // The page's bytes are not here but compressed by the residency layer
  // (which owns what this page is part of), and there is no `handle`: the
  // space leaves the pool address it backs unmapped, and the residency
  // layer makes such a page readable before any access it lets through.
  bool compressed = false;
};

}  // namespace tidepool::space
