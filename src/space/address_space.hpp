// AddressSpace: the device's virtual address space and physical pages as the
// pool sees them, for one device.
//
// It owns every reservation and every physical page tidepool created on the
// device. Physical device pages are either mapped under a reservation or held
// spare (created, unmapped, ready to back any range: that is what makes
// stitching possible). It enforces the device budget: physical device bytes
// (mapped + spare) never exceed device_limit. It holds no policy: which pages
// to unmap, and when, is the pool's decision. A page the pool stops using
// stays mapped where it was, parked (physical_page.hpp), until that mapping
// is in the way or the page is released; back() makes a parked mapping
// current again for free when its page is spare. A page may be parked with
// work still pending on it (PendingUse): that mapping is unmapped only once
// the owner's UnmapCheck says the work is done, so a kernel queued before
// the page moved never finds its address gone. Not thread-safe; the pool
// serialises calls.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "driver/driver.hpp"
#include "space/reservation.hpp"
#include "util/util.hpp"

namespace tidepool::space {

struct SpaceCounters {
  std::uint64_t maps = 0;           // cuMemMap calls (one per page)
  std::uint64_t unmaps = 0;         // cuMemUnmap calls (one per page)
  std::uint64_t parked_reuses = 0;  // pages made current again at a parked mapping: no driver call
  std::uint64_t creates = 0;        // physical pages created (or chunks allocated)
  std::uint64_t releases = 0;       // physical pages (or chunks) given back to the driver
  std::uint64_t map_batches = 0;    // back() calls that mapped at least one page
  std::uint64_t access_grants = 0;  // cuMemSetAccess calls for the pool's own device (one per run of pages)
};

// The owner's answer to whether work recorded as a PendingUse has finished.
// It may ask the driver; it never waits.
class UnmapCheck {
 public:
  virtual bool finished(const PendingUse& use) = 0;

 protected:
  ~UnmapCheck() = default;
};

class AddressSpace {
 public:
  struct Options {
    int device = 0;
    std::size_t device_limit = 0;  // bytes of physical device memory tidepool may hold
    bool use_vmm = true;           // false forces cuMemAlloc chunks even where VMM exists
    std::uint64_t peers = 0;       // other devices given access to every page, one bit each (set_peer_access)
    // Device bytes the process holds outside the pool, counted against
    // device_limit too (pool_limit); read at each check, never written here.
    // Null: none.
    const std::atomic<std::size_t>* outside_bytes = nullptr;
  };

  // Probes the device (the caller has made its context current).
  static util::Result<std::unique_ptr<AddressSpace>> create(const driver::Driver& driver, const Options& options);
  ~AddressSpace();
  AddressSpace(const AddressSpace&) = delete;
  AddressSpace& operator=(const AddressSpace&) = delete;

  [[nodiscard]] bool uses_vmm() const noexcept { return vmm_; }
  [[nodiscard]] std::size_t page_size() const noexcept { return page_size_; }
  [[nodiscard]] const driver::Capabilities& capabilities() const noexcept { return caps_; }

  // VMM: reserves `bytes` (rounded up to pages) of VA with nothing mapped.
  // Without VMM: allocates a backed chunk with cuMemAlloc, counted against
  // the budget. The Reservation lives until unreserve() or destruction.
  util::Result<Reservation*> reserve(std::size_t bytes);
  // Unmaps and releases everything under `r` and gives its VA (or chunk) back.
  util::Status unreserve(Reservation* r);

  // Maps device pages under every unmapped page overlapping [address,
  // address + length): a spare page parked there is made current at no cost;
  // otherwise spare pages go first and new ones are created within the
  // budget. Fails with out_of_memory, mapping nothing new, when spare
  // pages plus budget room are short; also, midway, when a parked mapping
  // in the way is still in use (pending_in_the_way() says so beforehand).
  util::Status back(Reservation& r, std::uintptr_t address, std::size_t length);
  // Pages back() would need to create or take from spares for this range.
  [[nodiscard]] std::size_t unbacked_pages(const Reservation& r, std::uintptr_t address,
                                           std::size_t length) const noexcept;
  // How many pages can be backed without unmapping anything: spares + budget room.
  [[nodiscard]] std::size_t available_pages() const noexcept;

  // The pool stops using pages [first, first + count) of `r`; their physical
  // pages become spare, left parked where they were. The caller guarantees
  // no block in use lies on them, and that no queued device work touches
  // them or, with `pending`, that all work queued from now on runs after
  // the work `pending` names (a device barrier): such a page is taken only
  // where it can stay mapped here until that work is done, and is otherwise
  // left current (an error, nothing changed for it).
  util::Status unback(Reservation& r, std::size_t first, std::size_t count, const PendingUse& pending = {});
  // What keeps back() from mapping [address, address + length) now: parked
  // mappings in the way whose pending work is not known done (asked of the
  // UnmapCheck). Appends one use per such page to `uses`; none: back() may go.
  void pending_in_the_way(Reservation& r, std::uintptr_t address, std::size_t length, std::vector<PendingUse>* uses);
  // Set by the owner before the first unback() with a pending use; it must
  // outlive the space or be unset.
  void set_unmap_check(UnmapCheck* check) noexcept { unmap_check_ = check; }

  // Eviction (the residency layer decides what and when; these only remap).
  // move_to_host: page `p` of `r` is on the device; its bytes have been
  // copied to `host`, and no device work can touch the page until this
  // returns. The device page is unmapped there (it becomes spare) and `host`
  // mapped in its place, device-accessible. On failure the device page is
  // mapped back, with the bytes it held, and the page stays on the device.
  util::Status move_to_host(Reservation& r, std::size_t p, HostPage* host);
  // move_to_device: page `p` is on the host; a device page (spare, or new
  // within the budget) is mapped there instead and the host page is handed
  // back through `released` (its bytes still readable at its staging
  // address: the caller copies them in before any device work touches the
  // page). On failure the host page is mapped back and nothing changes.
  util::Status move_to_device(Reservation& r, std::size_t p, HostPage** released);
  // One page of a batched move: in, the page and, to the host, the host
  // page holding its bytes; out, the move's status and, to the device, the
  // host page handed back.
  struct PageMoveRef {
    Reservation* reservation = nullptr;
    std::size_t page = 0;
    HostPage* host = nullptr;
    HostPage* released = nullptr;
    util::Status status;
  };
  // The same moves for many pages, each as the single move above says, with
  // access granted once per run of adjacent pages rather than per page:
  // cuMemSetAccess is the largest part of a page's remap (30 us a call on
  // an H200, against 1 us for cuMemMap), and the device waits at a gate
  // while the host remaps. A run whose grant fails is granted page by page.
  void move_to_host(std::span<PageMoveRef> moves);
  void move_to_device(std::span<PageMoveRef> moves);
  // swap_host_page: page `p` is on the host; `replacement` (holding the
  // same bytes) is mapped there instead and the old host page handed back
  // through `released`. On failure the old page is mapped back.
  util::Status swap_host_page(Reservation& r, std::size_t p, HostPage* replacement, HostPage** released);
  // Host pages unmapped by unback(), unreserve() or a trim since the last
  // call: the residency layer takes them back into its cache.
  std::vector<HostPage*> take_released_host_pages() { return std::exchange(released_host_, {}); }
  [[nodiscard]] std::size_t host_pages() const noexcept { return host_pages_; }

  // Peer access: a VMM mapping answers only to the devices its access list
  // names, so a peer that may read this device's cuMemAlloc memory (after
  // cuCtxEnablePeerAccess) needs its own grant. Grants `device` read-write
  // access to every page mapped now (current, parked or host-located) and
  // to every page mapped from now on; with `enabled` false, takes it back.
  // Chunks (no VMM) are the driver's own memory: its peer access covers them.
  util::Status set_peer_access(int device, bool enabled);
  // Read without the pool's lock (a launch asks whether another device may reach the pool).
  [[nodiscard]] std::uint64_t peers() const noexcept { return peers_.load(std::memory_order_relaxed); }

  // IPC: what another process needs to map [address, address + length) of
  // `r`, which the caller keeps where it is (no page moves, none is
  // released) until that process is done with it. VMM: the physical page of
  // every page overlapping the range, from the one holding `address` (the
  // caller exports each as a file descriptor); every such page must be on
  // the device. Chunks: the driver's own IPC handle, which names the whole
  // chunk. not_supported when pages were not created exportable.
  struct SharedPages {
    std::uintptr_t first_page = 0;  // where the first page (or the chunk) starts
    std::size_t page_size = 0;
    std::vector<CUmemGenericAllocationHandle> pages;
    CUipcMemHandle chunk{};
    bool is_chunk = false;
  };
  util::Status share(const Reservation& r, std::uintptr_t address, std::size_t length, SharedPages* out);

  // Releases up to `bytes` of spare pages to the driver (all when `bytes` is
  // SIZE_MAX), passing over any that cannot go yet (a parked mapping still
  // in use). Returns the bytes released.
  std::size_t release_spares(std::size_t bytes);

  [[nodiscard]] std::size_t device_bytes() const noexcept { return device_pages_ * page_size_; }
  [[nodiscard]] std::size_t device_pages() const noexcept { return device_pages_; }
  [[nodiscard]] std::size_t peak_device_bytes() const noexcept { return peak_device_pages_ * page_size_; }
  [[nodiscard]] std::size_t spare_bytes() const noexcept { return spares_.size() * page_size_; }
  // Whether stopping to use a page parks it (false once the driver refused
  // to map a page at a second place).
  [[nodiscard]] bool parks_pages() const noexcept { return parking_; }
  [[nodiscard]] std::size_t spare_pages() const noexcept { return spares_.size(); }
  // The budget as set: what the whole process may hold on the device.
  [[nodiscard]] std::size_t device_limit() const noexcept { return limit_; }
  // What the pool may hold of it: the budget less the bytes held outside the
  // pool (Options::outside_bytes), as they are now.
  [[nodiscard]] std::size_t pool_limit() const noexcept {
    const std::size_t outside = outside_ != nullptr ? outside_->load(std::memory_order_acquire) : 0;
    return limit_ > outside ? limit_ - outside : 0;
  }
  // The pool lowers it only once it holds no more (Pool::set_device_limit).
  void set_device_limit(std::size_t bytes) noexcept { limit_ = bytes; }
  [[nodiscard]] const SpaceCounters& counters() const noexcept { return counters_; }
  [[nodiscard]] const std::vector<std::unique_ptr<Reservation>>& reservations() const noexcept { return reservations_; }

 private:
  AddressSpace(const driver::Driver& driver, const Options& options, const driver::Capabilities& caps);
  util::Result<PhysicalPage*> create_page();
  // Unmaps its parked mappings and gives it back; false when an unmap fails
  // (it stays spare) or the driver refuses the release (see drop_page).
  bool release_page(PhysicalPage* page);
  // release_spares' loop over the spare list.
  std::size_t release_spare_pages(std::size_t bytes);
  // Gives it back to the driver as it is and forgets every place it is
  // mapped; false when the driver refused the release (the handle then
  // waits in unreleased_ and still counts as held).
  bool drop_page(PhysicalPage* page);
  // Retries the releases the driver refused; the bytes given back.
  std::size_t release_unreleased();
  void add_spare(PhysicalPage* page);
  void take_spare(PhysicalPage* page);
  // Unmaps whatever is mapped at page `p` of `r`, current or parked, at the
  // driver; a current page becomes spare.
  // `checked`: a mapping parked with pending work is not unmapped until the
  // UnmapCheck says it is done (false only where the caller has proven all
  // work done: unreserve()).
  util::Status unmap_at(Reservation& r, std::size_t p, bool checked = true);
  // Whether no work `use` names may still run (the UnmapCheck asked).
  [[nodiscard]] bool done(const PendingUse& use) const;
  // Whether the mapping at page `p` of `r` may be unmapped now (its pending
  // use cleared once done).
  bool may_unmap(Reservation& r, std::size_t p);
  util::Status park(Reservation& r, std::size_t p, const PendingUse& pending);
  // A spare (`preferred` if it is one: the page that held this address's
  // bytes), or a new page, mapped at page `p`; access not granted.
  util::Status map_spare(Reservation& r, std::size_t p, PhysicalPage* preferred = nullptr);
  // The halves of a batched move: the old mapping goes and the new one is
  // made; then, with access granted to the mapped ones, each is settled.
  enum class MoveStage : std::uint8_t {
    refused,   // nothing changed; the status says why
    failed,    // the old mapping is gone and the new one could not be made
    unmapped,  // the old mapping is gone and nothing is mapped (a compressed page)
    mapped,    // the new mapping is made, its access not yet granted
  };
  MoveStage start_to_host(PageMoveRef& m, PhysicalPage** device_page);
  void finish_to_host(PageMoveRef& m, MoveStage stage, PhysicalPage* device_page, util::Status granted);
  MoveStage start_to_device(PageMoveRef& m, HostPage** host);
  void finish_to_device(PageMoveRef& m, MoveStage stage, HostPage* host, util::Status granted);
  void grant_runs(std::span<PageMoveRef> moves, const std::vector<MoveStage>& stages,
                  std::vector<util::Status>& granted);
  // Gives this device and its peers read-write access to a range just mapped.
  util::Status grant_access(std::uintptr_t address, std::size_t bytes);
  // Sets one device's access to a mapped range.
  util::Status set_access(std::uintptr_t address, std::size_t bytes, int device, bool enabled);
  void note_device_pages(std::size_t pages) noexcept;

  const driver::Driver& driver_;
  const driver::Api& api_;
  driver::Capabilities caps_;
  int device_;
  std::atomic<std::uint64_t> peers_;  // bit d: device d has access too; written under the pool's lock
  bool vmm_;
  std::size_t page_size_;
  std::size_t limit_;
  const std::atomic<std::size_t>* outside_;
  std::size_t device_pages_ = 0;  // physical device pages held: mapped + spare (chunks count in pages)
  std::size_t peak_device_pages_ = 0;
  bool parking_ = true;
  std::vector<std::unique_ptr<PhysicalPage>> pages_;  // every device page held
  std::vector<PhysicalPage*> spares_;
  // Handles whose cuMemRelease failed: the driver still holds their memory,
  // so they stay in device_pages_ (the budget, reserved_bytes) until a later
  // release succeeds (fault sweep: cuMemRelease failing lost them for good).
  std::vector<CUmemGenericAllocationHandle> unreleased_;
  std::vector<std::unique_ptr<Reservation>> reservations_;
  std::vector<HostPage*> released_host_;  // owned by the residency layer
  std::size_t host_pages_ = 0;            // pool pages backed by a host page now
  SpaceCounters counters_;
  UnmapCheck* unmap_check_ = nullptr;
};

}  // namespace tidepool::space
