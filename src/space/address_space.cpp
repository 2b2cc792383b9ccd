// AddressSpace mechanics: reservations, the spare-page list, and map/unmap in
// batches. Every driver call the pool makes for memory goes through here, and
// none of them is on the allocation fast path: back() is reached only when a
// chosen block lies over unmapped pages.
#include "space/address_space.hpp"

#include <algorithm>
#include <limits>

#include "util/units.hpp"

namespace tidepool::space {

namespace {

constexpr std::size_t kFallbackPageSize = 2 * util::MiB;

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
      vmm_(options.use_vmm && caps.vmm),
      page_size_(vmm_ ? caps.granularity : kFallbackPageSize),
      limit_(options.device_limit != 0 ? options.device_limit : caps.total_bytes) {}

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
  if ((device_pages_ + pages) * page_size_ > limit_) {
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
    for (std::size_t p = r->next_mapped(0, r->page_count()); p < r->page_count();
         p = r->next_mapped(p + 1, r->page_count())) {
      if (auto s = unback(*r, p, 1); !s && result.ok()) result = s;
    }
    if (auto s = driver::check(api_.memAddressFree(r->base(), r->size()), "cuMemAddressFree"); !s && result.ok()) {
      result = s;
    }
  }
  reservations_.erase(it);
  return result;
}

util::Result<CUmemGenericAllocationHandle> AddressSpace::create_page() {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device_;
  CUmemGenericAllocationHandle handle = 0;
  if (auto s = driver::check(api_.memCreate(&handle, page_size_, &prop, 0), "cuMemCreate"); !s) return s;
  counters_.creates++;
  note_device_pages(device_pages_ + 1);
  return handle;
}

void AddressSpace::release_page(CUmemGenericAllocationHandle handle) {
  (void)api_.memRelease(handle);
  counters_.releases++;
  note_device_pages(device_pages_ - 1);
}

std::size_t AddressSpace::unbacked_pages(const Reservation& r, std::uintptr_t address,
                                         std::size_t length) const noexcept {
  if (r.is_chunk() || length == 0) return 0;
  const std::size_t first = r.page_of(address);
  const std::size_t last = r.page_of(address + length - 1);
  auto unusable = [&](std::size_t p) {
    return r.page(p).residency == Residency::unmapped || r.page(p).residency == Residency::broken;
  };
  std::size_t missing = 0;
  if (last - first < 8) {  // the common case: a block on a page or two
    for (std::size_t p = first; p <= last; ++p) missing += unusable(p) ? 1 : 0;
    return missing;
  }
  missing = (last + 1 - first) - r.mapped_pages(first, last + 1);
  for (std::size_t p = r.next_mapped(first, last + 1); p <= last; p = r.next_mapped(p + 1, last + 1)) {
    if (r.page(p).residency == Residency::broken) ++missing;
  }
  return missing;
}

std::size_t AddressSpace::available_pages() const noexcept {
  const std::size_t limit_pages = limit_ / page_size_;
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

  bool mapped_any = false;
  std::size_t run_start = SIZE_MAX;  // first page of the current run of newly mapped pages
  auto grant_access = [&](std::size_t run_end) -> util::Status {
    if (run_start == SIZE_MAX) return util::Status::success();
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device_;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    const std::size_t bytes = (run_end - run_start) * page_size_;
    auto s = driver::check(api_.memSetAccess(r.page_address(run_start), bytes, &access, 1), "cuMemSetAccess");
    if (!s) {
      // Mapped but not accessible: nothing may be handed out on these pages.
      // Unmap them again; a page that will not unmap is never used again.
      for (std::size_t p = run_start; p < run_end; ++p) {
        PageEntry& page = r.page(p);
        if (api_.memUnmap(r.page_address(p), page_size_) == CUDA_SUCCESS) {
          spares_.push_back(page.handle);
          counters_.unmaps++;
          page.handle = 0;
          r.set_residency(p, Residency::unmapped);
        } else {
          r.set_residency(p, Residency::broken);
        }
      }
    }
    run_start = SIZE_MAX;
    return s;
  };

  for (std::size_t p = first; p <= last; ++p) {
    PageEntry& page = r.page(p);
    if (page.residency == Residency::broken) {
      if (auto s = grant_access(p); !s) return s;
      if (auto s = unback(r, p, 1); !s) return s;
    }
    if (page.residency != Residency::unmapped) {
      if (auto s = grant_access(p); !s) return s;
      continue;
    }
    CUmemGenericAllocationHandle handle = 0;
    if (!spares_.empty()) {
      handle = spares_.back();
      spares_.pop_back();
    } else {
      auto created = create_page();
      if (!created) {
        (void)grant_access(p);
        return created.status();
      }
      handle = created.value();
    }
    if (auto s = driver::check(api_.memMap(r.page_address(p), page_size_, 0, handle, 0), "cuMemMap"); !s) {
      spares_.push_back(handle);
      (void)grant_access(p);
      return s;
    }
    counters_.maps++;
    mapped_any = true;
    page.handle = handle;
    r.set_residency(p, Residency::device);
    if (run_start == SIZE_MAX) run_start = p;
  }
  auto s = grant_access(last + 1);
  if (mapped_any) counters_.map_batches++;
  return s;
}

util::Status AddressSpace::unback(Reservation& r, std::size_t first, std::size_t count) {
  if (r.is_chunk()) return util::Status::success();
  util::Status result;
  for (std::size_t p = first; p < first + count && p < r.page_count(); ++p) {
    PageEntry& page = r.page(p);
    if (page.residency == Residency::unmapped) continue;
    if (auto s = driver::check(api_.memUnmap(r.page_address(p), page_size_), "cuMemUnmap"); !s) {
      if (result.ok()) result = s;
      continue;
    }
    counters_.unmaps++;
    if (page.residency != Residency::host) {
      spares_.push_back(page.handle);
    } else {
      (void)api_.memRelease(page.handle);
    }
    page.handle = 0;
    r.set_residency(p, Residency::unmapped);
  }
  // Spares beyond a lowered budget go back to the driver at once.
  while (!spares_.empty() && device_bytes() > limit_) {
    release_page(spares_.back());
    spares_.pop_back();
  }
  return result;
}

std::size_t AddressSpace::release_spares(std::size_t bytes) {
  std::size_t released = 0;
  while (!spares_.empty() && released < bytes) {
    release_page(spares_.back());
    spares_.pop_back();
    released += page_size_;
  }
  return released;
}

}  // namespace tidepool::space
