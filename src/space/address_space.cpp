// AddressSpace mechanics: reservations, the spare-page list, and map/unmap in
// batches. Every driver call the pool makes for memory goes through here, and
// none of them is on the allocation fast path: back() is reached only when a
// chosen block lies over unmapped pages.
#include "space/address_space.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <limits>

#include "util/util.hpp"

namespace tidepool::space {

namespace {

constexpr std::size_t kFallbackPageSize = 2 * util::MiB;

void forget_parked(PhysicalPage& physical, const PageLocation& at) {
  auto* parked_end = physical.parked.begin() + physical.parked_count;
  auto* found = std::find(physical.parked.begin(), parked_end, at);
  if (found == parked_end) return;
  std::move(found + 1, parked_end, found);
  physical.parked_count--;
}

}  // namespace

util::Result<std::unique_ptr<AddressSpace>> AddressSpace::create(const driver::Driver& driver, const Options& options) {
  auto caps = driver::probe(driver, options.device);
  if (!caps) return caps.status();
  return std::unique_ptr<AddressSpace>(new AddressSpace(driver, options, caps.value()));
}

AddressSpace::AddressSpace(const driver::Driver& driver, const Options& options, const driver::Capabilities& caps)
    : driver_(driver),
      api_(driver.api()),
      caps_(caps),
      device_(options.device),
      peers_(options.peers & ~(std::uint64_t{1} << options.device)),
      vmm_(options.use_vmm && caps.vmm),
      page_size_(vmm_ ? caps.granularity : kFallbackPageSize),
      limit_(options.device_limit != 0 ? options.device_limit : caps.total_bytes),
      outside_(options.outside_bytes) {}

AddressSpace::~AddressSpace() {
  while (!reservations_.empty()) {
    (void)unreserve(reservations_.back().get());
  }
  release_spares(std::numeric_limits<std::size_t>::max());
}

void AddressSpace::note_device_pages(std::size_t pages) noexcept {
  device_pages_ = pages;
  peak_device_pages_ = std::max(peak_device_pages_, device_pages_);
}

util::Result<Reservation*> AddressSpace::reserve(std::size_t bytes) {
  const std::size_t size = util::round_up(std::max<std::size_t>(bytes, 1), page_size_);
  CUdeviceptr base = 0;
  if (vmm_) {
    if (auto s = driver::check(api_.memAddressReserve(&base, size, page_size_, 0, 0), "cuMemAddressReserve"); !s) {
      return s;
    }
    reservations_.push_back(std::make_unique<Reservation>(base, size, page_size_, false));
    return reservations_.back().get();
  }
  const std::size_t pages = size / page_size_;
  if ((device_pages_ + pages) * page_size_ > pool_limit()) {
    return util::Status(util::Error::out_of_memory, "device budget exhausted");
  }
  if (auto s = driver::check(api_.memAlloc(&base, size), "cuMemAlloc"); !s) return s;
  counters_.creates++;
  note_device_pages(device_pages_ + pages);
  reservations_.push_back(std::make_unique<Reservation>(base, size, page_size_, true));
  return reservations_.back().get();
}

util::Status AddressSpace::unreserve(Reservation* r) {
  auto it =
      std::find_if(reservations_.begin(), reservations_.end(), [r](const auto& owned) { return owned.get() == r; });
  if (it == reservations_.end()) return {util::Error::invalid_value, "unknown reservation"};
  util::Status result;
  if (r->is_chunk()) {
    result = driver::check(api_.memFree(r->base()), "cuMemFree");
    counters_.releases++;
    note_device_pages(device_pages_ - r->page_count());
  } else {
    // Current and parked mappings alike: no physical page may keep a
    // location in a reservation that is gone.
    for (std::size_t p = 0; p < r->mapped_limit(); ++p) {
      if (r->page(p).host != nullptr) {
        if (auto s = unmap_at(*r, p, /*checked=*/false); !s && result.ok()) result = s;
        continue;
      }
      PhysicalPage* physical = r->page(p).physical;
      if (physical == nullptr) continue;
      if (auto s = unmap_at(*r, p, /*checked=*/false); !s) {
        if (result.ok()) result = s;
        if (physical->current == PageLocation{r, p}) {
          drop_page(physical);  // released still mapped: the driver frees it with the mapping
        } else {
          forget_parked(*physical, {r, p});
          r->page(p).physical = nullptr;
        }
      }
    }
    if (auto s = driver::check(api_.memAddressFree(r->base(), r->size()), "cuMemAddressFree"); !s && result.ok()) {
      result = s;
    }
  }
  reservations_.erase(it);
  return result;
}

util::Result<PhysicalPage*> AddressSpace::create_page() {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device_;
  // Exportable where the driver can: IPC hands these pages to other processes.
  if (caps_.posix_fd_handles) prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle handle = 0;
  if (auto s = driver::check(api_.memCreate(&handle, page_size_, &prop, 0), "cuMemCreate"); !s) return s;
  counters_.creates++;
  note_device_pages(device_pages_ + 1);
  auto page = std::make_unique<PhysicalPage>();
  page->handle = handle;
  page->slot = pages_.size();
  pages_.push_back(std::move(page));
  return pages_.back().get();
}

bool AddressSpace::drop_page(PhysicalPage* page) {
  if (page->is_spare()) take_spare(page);
  for (std::size_t i = 0; i < page->parked_count; ++i) {
    const PageLocation at = page->parked[i];
    at.reservation->page(at.page).physical = nullptr;
    at.reservation->page(at.page).pending = {};
  }
  if (Reservation* r = page->current.reservation; r != nullptr) {
    r->page(page->current.page).physical = nullptr;
    r->set_residency(page->current.page, Residency::unmapped);
  }
  const bool released = driver::check(api_.memRelease(page->handle), "cuMemRelease").ok();
  if (released) {
    counters_.releases++;
    note_device_pages(device_pages_ - 1);
  } else {
    unreleased_.push_back(page->handle);
  }
  const std::size_t slot = page->slot;
  pages_[slot] = std::move(pages_.back());
  pages_[slot]->slot = slot;
  pages_.pop_back();
  return released;
}

std::size_t AddressSpace::release_unreleased() {
  std::size_t released = 0;
  while (!unreleased_.empty() && api_.memRelease(unreleased_.back()) == CUDA_SUCCESS) {
    unreleased_.pop_back();
    counters_.releases++;
    note_device_pages(device_pages_ - 1);
    released += page_size_;
  }
  return released;
}

bool AddressSpace::release_page(PhysicalPage* page) {
  // Its parked mappings go first: the driver frees memory only once it is
  // mapped nowhere.
  while (page->parked_count > 0) {
    const PageLocation at = page->parked[page->parked_count - 1];
    if (!unmap_at(*at.reservation, at.page)) return false;
  }
  return drop_page(page);
}

void AddressSpace::add_spare(PhysicalPage* page) {
  page->spare_slot = spares_.size();
  spares_.push_back(page);
}

void AddressSpace::take_spare(PhysicalPage* page) {
  const std::size_t slot = page->spare_slot;
  spares_[slot] = spares_.back();
  spares_[slot]->spare_slot = slot;
  spares_.pop_back();
  page->spare_slot = SIZE_MAX;
}

bool AddressSpace::done(const PendingUse& use) const {
  return !use.any || (unmap_check_ != nullptr && unmap_check_->finished(use));
}

bool AddressSpace::may_unmap(Reservation& r, std::size_t p) {
  PendingUse& pending = r.page(p).pending;
  if (!done(pending)) return false;
  pending = {};
  return true;
}

void AddressSpace::pending_in_the_way(Reservation& r, std::uintptr_t address, std::size_t length,
                                      std::vector<PendingUse>* uses) {
  if (r.is_chunk() || length == 0) return;
  for (std::size_t p = r.page_of(address); p <= r.page_of(address + length - 1); ++p) {
    const PageEntry& page = r.page(p);
    // Parked here and spare, it becomes current here again: no unmap.
    if (page.residency != Residency::unmapped || page.physical == nullptr || page.physical->is_spare()) continue;
    if (!may_unmap(r, p)) uses->push_back(page.pending);
  }
}

util::Status AddressSpace::unmap_at(Reservation& r, std::size_t p, bool checked) {
  PageEntry& entry = r.page(p);
  if (checked && !may_unmap(r, p)) {
    return {util::Error::out_of_memory, "a parked page is still in use by queued work"};
  }
  entry.pending = {};
  if (HostPage* host = entry.host; host != nullptr) {
    if (!host->compressed) {  // a compressed page's address maps nothing
      if (auto s = driver::check(api_.memUnmap(r.page_address(p), page_size_), "cuMemUnmap"); !s) return s;
      counters_.unmaps++;
    }
    entry.host = nullptr;
    host->current = {};
    host_pages_--;
    r.set_residency(p, Residency::unmapped);
    released_host_.push_back(host);
    return util::Status::success();
  }
  PhysicalPage* physical = entry.physical;
  if (physical == nullptr) return util::Status::success();
  if (auto s = driver::check(api_.memUnmap(r.page_address(p), page_size_), "cuMemUnmap"); !s) return s;
  counters_.unmaps++;
  entry.physical = nullptr;
  const PageLocation here{&r, p};
  if (physical->current == here) {
    physical->current = {};
    r.set_residency(p, Residency::unmapped);
    add_spare(physical);
    return util::Status::success();
  }
  forget_parked(*physical, here);
  return util::Status::success();
}

util::Status AddressSpace::park(Reservation& r, std::size_t p, const PendingUse& pending) {
  PageEntry& entry = r.page(p);
  PhysicalPage* physical = entry.physical;
  // Work still using this mapping: it must stay (see unback).
  const auto unmap_here = [&]() -> util::Status {
    if (!done(pending)) return {util::Error::out_of_memory, "the page is still in use by queued work"};
    return unmap_at(r, p);
  };
  if (!parking_ || entry.residency != Residency::device) return unmap_here();
  if (physical->parked_count == PhysicalPage::kMaxParked) {
    // The oldest parked mapping no work still uses makes room; if none
    // will go, this one is unmapped instead.
    std::size_t slot = 0;
    while (slot < physical->parked_count &&
           !may_unmap(*physical->parked[slot].reservation, physical->parked[slot].page)) {
      ++slot;
    }
    if (slot == physical->parked_count) return unmap_here();
    const PageLocation room = physical->parked[slot];
    if (!unmap_at(*room.reservation, room.page)) return unmap_here();
  }
  entry.pending = pending;
  physical->parked[physical->parked_count++] = {&r, p};
  physical->current = {};
  r.set_residency(p, Residency::unmapped);
  add_spare(physical);
  return util::Status::success();
}

util::Status AddressSpace::map_spare(Reservation& r, std::size_t p, PhysicalPage* preferred) {
  PhysicalPage* physical = nullptr;
  if (preferred != nullptr && preferred->is_spare()) {
    physical = preferred;
    take_spare(physical);
  } else if (!spares_.empty()) {
    physical = spares_.back();
    take_spare(physical);
  } else {
    auto created = create_page();
    if (!created) return created.status();
    physical = created.value();
  }
  const std::uintptr_t address = r.page_address(p);
  CUresult result = api_.memMap(address, page_size_, 0, physical->handle, 0);
  if (result != CUDA_SUCCESS && physical->parked_count > 0) {
    // A driver that will not map a page at a second place: parking stops,
    // and this page's parked mappings go before it is mapped here.
    parking_ = false;
    while (physical->parked_count > 0) {
      const PageLocation at = physical->parked[physical->parked_count - 1];
      if (!unmap_at(*at.reservation, at.page)) break;
    }
    if (physical->parked_count == 0) result = api_.memMap(address, page_size_, 0, physical->handle, 0);
  }
  if (auto s = driver::check(result, "cuMemMap"); !s) {
    add_spare(physical);
    return s;
  }
  counters_.maps++;
  r.page(p).physical = physical;
  r.page(p).pending = {};
  physical->current = {&r, p};
  r.set_residency(p, Residency::device);
  return util::Status::success();
}

std::size_t AddressSpace::unbacked_pages(const Reservation& r, std::uintptr_t address,
                                         std::size_t length) const noexcept {
  if (r.is_chunk() || length == 0) return 0;
  const std::size_t first = r.page_of(address);
  const std::size_t last = r.page_of(address + length - 1);
  // By the bitmap of mapped pages: a broken page counts as mapped there.
  std::size_t missing = (last + 1 - first) - r.mapped_pages(first, last + 1);
  if (r.broken_pages() == 0) return missing;
  for (std::size_t p = r.next_mapped(first, last + 1); p <= last; p = r.next_mapped(p + 1, last + 1)) {
    if (r.page(p).residency == Residency::broken) ++missing;
  }
  return missing;
}

std::size_t AddressSpace::available_pages() const noexcept {
  const std::size_t limit_pages = pool_limit() / page_size_;
  const std::size_t room = limit_pages > device_pages_ ? limit_pages - device_pages_ : 0;
  return spares_.size() + room;
}

util::Status AddressSpace::back(Reservation& r, std::uintptr_t address, std::size_t length) {
  if (r.is_chunk() || length == 0) return util::Status::success();
  const std::size_t first = r.page_of(address);
  const std::size_t last = r.page_of(address + length - 1);
  if (unbacked_pages(r, address, length) > available_pages()) {
    return {util::Error::out_of_memory, "device budget exhausted"};
  }

  // Spare pages parked here become current again first, before a spare
  // mapped elsewhere in the range could take one of them.
  for (std::size_t p = first; p <= last; ++p) {
    PageEntry& page = r.page(p);
    PhysicalPage* parked = page.physical;
    if (page.residency != Residency::unmapped || parked == nullptr || !parked->is_spare()) continue;
    take_spare(parked);
    forget_parked(*parked, {&r, p});
    page.pending = {};
    parked->current = {&r, p};
    r.set_residency(p, Residency::device);
    counters_.parked_reuses++;
  }

  bool mapped_any = false;
  std::size_t run_start = SIZE_MAX;  // first page of the current run of newly mapped pages
  auto grant_access = [&](std::size_t run_end) -> util::Status {
    if (run_start == SIZE_MAX) return util::Status::success();
    auto s = this->grant_access(r.page_address(run_start), (run_end - run_start) * page_size_);
    if (!s) {
      // Mapped but not accessible: nothing may be handed out on these pages.
      // Unmap them again; a page that will not unmap is never used again.
      for (std::size_t p = run_start; p < run_end; ++p) {
        if (!unmap_at(r, p)) r.set_residency(p, Residency::broken);
      }
    }
    run_start = SIZE_MAX;
    return s;
  };

  for (std::size_t p = first; p <= last; ++p) {
    PageEntry& page = r.page(p);
    if (page.residency == Residency::broken) {
      if (auto s = grant_access(p); !s) return s;
      if (auto s = unmap_at(r, p); !s) return s;
    }
    if (page.residency != Residency::unmapped) {
      if (auto s = grant_access(p); !s) return s;
      continue;
    }
    // Parked here, but current elsewhere: that mapping is in the way.
    if (page.physical != nullptr) {
      if (auto s = unmap_at(r, p); !s) {
        (void)grant_access(p);
        return s;
      }
    }
    if (auto s = map_spare(r, p); !s) {
      (void)grant_access(p);
      return s;
    }
    mapped_any = true;
    if (run_start == SIZE_MAX) run_start = p;
  }
  auto s = grant_access(last + 1);
  if (mapped_any) counters_.map_batches++;
  return s;
}

util::Status AddressSpace::unback(Reservation& r, std::size_t first, std::size_t count, const PendingUse& pending) {
  if (r.is_chunk()) return util::Status::success();
  util::Status result;
  for (std::size_t p = first; p < first + count && p < r.page_count(); ++p) {
    if (r.page(p).residency == Residency::unmapped) continue;
    if (auto s = park(r, p, pending); !s && result.ok()) result = s;
  }
  // Spares beyond a lowered budget go back to the driver at once.
  if (const std::size_t limit = pool_limit(); device_bytes() > limit) (void)release_spare_pages(device_bytes() - limit);
  return result;
}

util::Status AddressSpace::grant_access(std::uintptr_t address, std::size_t bytes) {
  std::array<CUmemAccessDesc, 64> access{};
  std::size_t count = 0;
  const auto add = [&](int device) {
    access[count].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access[count].location.id = device;
    access[count].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    ++count;
  };
  add(device_);
  for (std::uint64_t rest = peers(); rest != 0; rest &= rest - 1) add(std::countr_zero(rest));
  counters_.access_grants++;
  return driver::check(api_.memSetAccess(address, bytes, access.data(), count), "cuMemSetAccess");
}

util::Status AddressSpace::set_access(std::uintptr_t address, std::size_t bytes, int device, bool enabled) {
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = enabled ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_NONE;
  return driver::check(api_.memSetAccess(address, bytes, &access, 1), "cuMemSetAccess");
}

util::Status AddressSpace::set_peer_access(int device, bool enabled) {
  if (device < 0 || device >= 64 || device == device_) return {util::Error::invalid_value, "not a peer device"};
  const std::uint64_t bit = std::uint64_t{1} << device;
  if (((peers() & bit) != 0) == enabled) return util::Status::success();
  // From now on every new mapping names it (or not); then the ones there are.
  peers_.fetch_xor(bit, std::memory_order_relaxed);
  if (!vmm_) return util::Status::success();
  util::Status result;
  const auto apply = [&](std::uintptr_t address, std::size_t bytes) {
    if (auto s = set_access(address, bytes, device, enabled); !s && result.ok()) result = s;
  };
  for (const auto& r : reservations_) {
    if (r->is_chunk()) continue;
    // Runs of mapped pages, one call each.
    std::size_t run = SIZE_MAX;
    for (std::size_t p = 0; p <= r->page_count(); ++p) {
      const bool mapped =
          p < r->page_count() && (r->page(p).residency == Residency::device ||
                                  (r->page(p).residency == Residency::host && !r->page(p).host->compressed));
      if (mapped && run == SIZE_MAX) run = p;
      if (!mapped && run != SIZE_MAX) {
        apply(r->page_address(run), (p - run) * page_size_);
        run = SIZE_MAX;
      }
    }
  }
  // Parked mappings become current again without a driver call.
  for (const auto& page : pages_) {
    for (std::size_t i = 0; i < page->parked_count; ++i) {
      const PageLocation& at = page->parked[i];
      apply(at.reservation->page_address(at.page), page_size_);
    }
  }
  return result;
}

util::Status AddressSpace::move_to_host(Reservation& r, std::size_t p, HostPage* host) {
  PageMoveRef move{&r, p, host, nullptr, {}};
  move_to_host(std::span<PageMoveRef>(&move, 1));
  return move.status;
}

void AddressSpace::move_to_host(std::span<PageMoveRef> moves) {
  std::vector<MoveStage> stages(moves.size());
  std::vector<PhysicalPage*> device_pages(moves.size());
  for (std::size_t i = 0; i < moves.size(); ++i) stages[i] = start_to_host(moves[i], &device_pages[i]);
  std::vector<util::Status> granted(moves.size());
  grant_runs(moves, stages, granted);
  for (std::size_t i = 0; i < moves.size(); ++i) finish_to_host(moves[i], stages[i], device_pages[i], granted[i]);
}

AddressSpace::MoveStage AddressSpace::start_to_host(PageMoveRef& m, PhysicalPage** device_page) {
  Reservation& r = *m.reservation;
  PageEntry& entry = r.page(m.page);
  if (r.is_chunk() || entry.residency != Residency::device || m.host == nullptr) {
    m.status = {util::Error::invalid_value, "page is not on the device"};
    return MoveStage::refused;
  }
  *device_page = entry.physical;
  if (m.status = unmap_at(r, m.page); !m.status) return MoveStage::refused;  // the device page becomes spare
  if (m.host->compressed) return MoveStage::unmapped;  // nothing to map: the address stays unmapped
  m.status = driver::check(api_.memMap(r.page_address(m.page), page_size_, 0, m.host->handle, 0), "cuMemMap");
  if (!m.status) return MoveStage::failed;
  counters_.maps++;
  return MoveStage::mapped;
}

void AddressSpace::finish_to_host(PageMoveRef& m, MoveStage stage, PhysicalPage* device_page, util::Status granted) {
  if (stage == MoveStage::refused) return;
  Reservation& r = *m.reservation;
  const std::size_t p = m.page;
  PageEntry& entry = r.page(p);
  const std::uintptr_t address = r.page_address(p);
  if (stage == MoveStage::mapped && !granted) {
    m.status = granted;
    if (!driver::check(api_.memUnmap(address, page_size_), "cuMemUnmap")) {
      // Neither usable nor removable: the page is lost to the pool, the
      // bytes are not (they are in the host page and in the device page).
      entry.host = m.host;
      m.host->current = {&r, p};
      host_pages_++;
      r.set_residency(p, Residency::broken);
      return;
    }
    counters_.unmaps++;
    stage = MoveStage::failed;
  }
  if (stage == MoveStage::failed) {
    // The device page still holds the bytes: it goes back where it was.
    if (auto back_again = map_spare(r, p, device_page); back_again) (void)grant_access(address, page_size_);
    return;
  }
  entry.host = m.host;
  m.host->current = {&r, p};
  host_pages_++;
  r.set_residency(p, Residency::host);
  m.status = util::Status::success();
}

void AddressSpace::grant_runs(std::span<PageMoveRef> moves, const std::vector<MoveStage>& stages,
                              std::vector<util::Status>& granted) {
  std::size_t i = 0;
  while (i < moves.size()) {
    if (stages[i] != MoveStage::mapped) {
      ++i;
      continue;
    }
    std::size_t end = i + 1;  // the run: adjacent pages of one reservation, each mapped
    while (end < moves.size() && stages[end] == MoveStage::mapped &&
           moves[end].reservation == moves[end - 1].reservation && moves[end].page == moves[end - 1].page + 1) {
      ++end;
    }
    const util::Status s = grant_access(moves[i].reservation->page_address(moves[i].page), (end - i) * page_size_);
    for (std::size_t k = i; k < end; ++k) {
      if (s || end - i == 1) {
        granted[k] = s;
        continue;
      }
      // One page of the run may be what failed: each on its own.
      granted[k] = grant_access(moves[k].reservation->page_address(moves[k].page), page_size_);
    }
    i = end;
  }
}

util::Status AddressSpace::swap_host_page(Reservation& r, std::size_t p, HostPage* replacement, HostPage** released) {
  PageEntry& entry = r.page(p);
  HostPage* old = entry.host;
  if (old == nullptr || entry.residency != Residency::host || replacement == nullptr) {
    return {util::Error::invalid_value, "page is not on the host"};
  }
  const std::uintptr_t address = r.page_address(p);
  if (!old->compressed) {
    if (auto s = driver::check(api_.memUnmap(address, page_size_), "cuMemUnmap"); !s) return s;
    counters_.unmaps++;
  }
  HostPage* mapped = replacement;
  util::Status s = driver::check(api_.memMap(address, page_size_, 0, replacement->handle, 0), "cuMemMap");
  if (s) {
    counters_.maps++;
    s = grant_access(address, page_size_);
    if (!s) {
      if (!driver::check(api_.memUnmap(address, page_size_), "cuMemUnmap")) {
        // Neither usable nor removable: the replacement stays the space's
        // (its caller must not reuse it), the page is lost to the pool.
        entry.host = replacement;
        old->current = {};
        replacement->current = {&r, p};
        *released = old;
        r.set_residency(p, Residency::broken);
        return s;
      }
      counters_.unmaps++;
    }
  }
  if (!s) {
    mapped = old;
    if (old->compressed) return s;  // its address maps nothing again
    if (driver::check(api_.memMap(address, page_size_, 0, old->handle, 0), "cuMemMap")) {
      counters_.maps++;
      (void)grant_access(address, page_size_);
    } else {
      r.set_residency(p, Residency::broken);
    }
    return s;
  }
  entry.host = mapped;
  old->current = {};
  replacement->current = {&r, p};
  *released = old;
  return util::Status::success();
}

util::Status AddressSpace::move_to_device(Reservation& r, std::size_t p, HostPage** released) {
  PageMoveRef move{&r, p, nullptr, nullptr, {}};
  move_to_device(std::span<PageMoveRef>(&move, 1));
  if (move.status) *released = move.released;
  return move.status;
}

void AddressSpace::move_to_device(std::span<PageMoveRef> moves) {
  std::vector<MoveStage> stages(moves.size());
  std::vector<HostPage*> hosts(moves.size());
  for (std::size_t i = 0; i < moves.size(); ++i) stages[i] = start_to_device(moves[i], &hosts[i]);
  std::vector<util::Status> granted(moves.size());
  grant_runs(moves, stages, granted);
  for (std::size_t i = 0; i < moves.size(); ++i) finish_to_device(moves[i], stages[i], hosts[i], granted[i]);
}

AddressSpace::MoveStage AddressSpace::start_to_device(PageMoveRef& m, HostPage** host_page) {
  Reservation& r = *m.reservation;
  PageEntry& entry = r.page(m.page);
  HostPage* host = entry.host;
  *host_page = host;
  if (host == nullptr || entry.residency != Residency::host) {
    m.status = {util::Error::invalid_value, "page is not on the host"};
    return MoveStage::refused;
  }
  if (spares_.empty() && available_pages() == 0) {
    m.status = {util::Error::out_of_memory, "device budget exhausted"};
    return MoveStage::refused;
  }
  if (!host->compressed) {
    m.status = driver::check(api_.memUnmap(r.page_address(m.page), page_size_), "cuMemUnmap");
    if (!m.status) return MoveStage::refused;
    counters_.unmaps++;
  }
  entry.host = nullptr;
  r.set_residency(m.page, Residency::unmapped);
  m.status = map_spare(r, m.page);
  return m.status ? MoveStage::mapped : MoveStage::failed;
}

void AddressSpace::finish_to_device(PageMoveRef& m, MoveStage stage, HostPage* host, util::Status granted) {
  if (stage == MoveStage::refused) return;
  Reservation& r = *m.reservation;
  const std::size_t p = m.page;
  PageEntry& entry = r.page(p);
  const std::uintptr_t address = r.page_address(p);
  util::Status s = m.status;
  bool unmapped = true;
  if (stage == MoveStage::mapped && !granted) {
    s = granted;
    unmapped = static_cast<bool>(unmap_at(r, p));  // back to spare
  }
  m.status = s;
  if (!s && host->compressed && unmapped) {
    // Its bytes are still in their stream: it stays compressed, unmapped.
    entry.host = host;
    r.set_residency(p, Residency::host);
    return;
  }
  if (!s && host->compressed) {
    // A device page no access reaches is stuck there: the page is lost to
    // the pool, and its stream with it. The caller reports the loss.
    host->current = {};
    host_pages_--;
    released_host_.push_back(host);
    r.set_residency(p, Residency::broken);
    m.status = {util::Error::driver_error, "a page could not be mapped back after a failed move"};
    return;
  }
  if (!s) {
    // The host page still holds the bytes: it goes back where it was.
    if (!driver::check(api_.memMap(address, page_size_, 0, host->handle, 0), "cuMemMap")) {
      // Two failures in a row: the page stays unmapped and the host page
      // goes back to the cache. The caller reports the loss.
      host->current = {};
      host_pages_--;
      released_host_.push_back(host);
      m.status = {util::Error::driver_error, "a page could not be mapped back after a failed move"};
      return;
    }
    counters_.maps++;
    entry.host = host;
    r.set_residency(p, grant_access(address, page_size_) ? Residency::host : Residency::broken);
    return;
  }
  host->current = {};
  host_pages_--;
  m.released = host;
}

std::size_t AddressSpace::release_spares(std::size_t bytes) {
  const std::size_t released = release_unreleased();
  return released >= bytes ? released : released + release_spare_pages(bytes - released);
}

std::size_t AddressSpace::release_spare_pages(std::size_t bytes) {
  // Newest first; a page that will not go (a parked mapping still in use by
  // queued work, an unmap or release the driver refused) is passed over, and
  // the one moved into its slot was already passed over.
  std::size_t released = 0;
  for (std::size_t i = spares_.size(); i > 0 && released < bytes;) {
    --i;
    if (i >= spares_.size()) continue;
    if (release_page(spares_[i])) released += page_size_;
  }
  return released;
}

util::Status AddressSpace::share(const Reservation& r, std::uintptr_t address, std::size_t length, SharedPages* out) {
  *out = SharedPages{};
  out->page_size = page_size_;
  if (length == 0 || !r.contains(address) || address + length > r.end()) {
    return {util::Error::invalid_value, "the range to share is not inside the reservation"};
  }
  if (r.is_chunk()) {
    if (api_.ipcGetMemHandle == nullptr) return {util::Error::not_supported, "the driver has no cuIpcGetMemHandle"};
    out->is_chunk = true;
    out->first_page = r.base();
    return driver::check(api_.ipcGetMemHandle(&out->chunk, r.base()), "cuIpcGetMemHandle");
  }
  if (!caps_.posix_fd_handles) {
    return {util::Error::not_supported, "the driver cannot export pool pages as file descriptors"};
  }
  const std::size_t first = r.page_of(address);
  const std::size_t last = r.page_of(address + length - 1);
  out->first_page = r.page_address(first);
  for (std::size_t p = first; p <= last; ++p) {
    const PageEntry& entry = r.page(p);
    if (entry.residency != Residency::device || entry.physical == nullptr) {
      out->pages.clear();
      return {util::Error::out_of_memory, "a page to share is not on the device"};
    }
    out->pages.push_back(entry.physical->handle);
  }
  return util::Status::success();
}

}  // namespace tidepool::space
