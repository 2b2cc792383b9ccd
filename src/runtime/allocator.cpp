// Allocator construction (primary context, capabilities, space and pool) and
// the traced paths around the pool's allocate and deallocate.
#include "runtime/allocator.hpp"

#include <algorithm>

#include "runtime/trace_recorder.hpp"

namespace tidepool::runtime {

util::Result<std::unique_ptr<Allocator>> Allocator::create(const driver::Driver& driver,
                                                           const AllocatorOptions& options) {
  const driver::Api& api = driver.api();
  if (auto s = driver::check(api.init(0), "cuInit"); !s) return s;
  std::unique_ptr<Allocator> allocator(new Allocator());
  allocator->driver_ = &driver;
  allocator->device_ = options.device;
  if (auto s = driver::check(api.deviceGet(&allocator->cu_device_, options.device), "cuDeviceGet"); !s) return s;
  if (auto s = driver::check(api.devicePrimaryCtxRetain(&allocator->context_, allocator->cu_device_),
                             "cuDevicePrimaryCtxRetain");
      !s) {
    return s;
  }
  driver::ScopedContext scope(api, allocator->context_);
  space::AddressSpace::Options space_options;
  space_options.device = options.device;
  space_options.device_limit = options.device_limit;
  space_options.use_vmm = options.use_vmm;
  auto space = space::AddressSpace::create(driver, space_options);
  if (!space) return space.status();
  allocator->space_ = std::move(space.value());
  if (options.streams != nullptr) {
    allocator->streams_ = options.streams;
  } else {
    allocator->own_streams_ = std::make_unique<pool::StreamRegistry>(api);
    allocator->streams_ = allocator->own_streams_.get();
  }
  auto pool = pool::Pool::create(driver, *allocator->space_, allocator->context_, *allocator->streams_, options.pool);
  if (!pool) return pool.status();
  allocator->pool_ = std::move(pool.value());
  if (options.evict) {
    auto residency = residency::Residency::create(driver, allocator->context_, *allocator->space_, *allocator->streams_,
                                                  options.residency);
    // A driver call that failed once (the fault sweep: the transit's
    // cuStreamCreate or cuEventCreate) would otherwise turn eviction off for
    // the life of the process; what the device cannot do (not_supported) or
    // the config refuses stays final.
    if (!residency && (residency.status().error() == util::Error::driver_error ||
                       residency.status().error() == util::Error::out_of_memory)) {
      residency = residency::Residency::create(driver, allocator->context_, *allocator->space_, *allocator->streams_,
                                               options.residency);
    }
    if (residency) {
      allocator->residency_ = std::move(residency.value());
      allocator->pool_->set_page_mover(allocator->residency_.get());
    } else {
      allocator->eviction_off_reason_ = residency.status().message();
    }
  }
  allocator->trace_ = options.trace;
  return allocator;
}

util::Result<std::uintptr_t> Allocator::traced_allocate(std::size_t size, std::uintptr_t stream, bool ordered) {
  auto result = pool_->allocate(size, stream, ordered);
  // Size 0 hands out no block (address 0): nothing to replay.
  if (size != 0) {
    if (result) {
      trace_->record(TraceAction::allocate, result.value(), size, stream);
    } else {
      trace_->record(TraceAction::allocate_failure, 0, size, stream);
    }
  }
  return result;
}

util::Status Allocator::traced_deallocate(std::uintptr_t address, std::uintptr_t stream, bool ordered) {
  // Recorded before the block goes back: once it is back, another thread may
  // be handed the same address and record that first. A pointer that is not
  // a live block (size 0) is refused by the pool and not recorded.
  const std::size_t size = address != 0 ? pool_->requested_size(address) : 0;
  if (size != 0) trace_->record(TraceAction::free, address, size, stream);
  return pool_->deallocate(address, stream, ordered);
}

Allocator::~Allocator() {
  if (residency_) residency_->drain();
  pool_.reset();
  residency_.reset();
  space_.reset();
  if (context_ != nullptr && driver_->api().devicePrimaryCtxRelease != nullptr) {
    (void)driver_->api().devicePrimaryCtxRelease(cu_device_);
  }
}

bool Allocator::use_in_launch(std::uintptr_t word, CUstream stream, LaunchUse* use) {
  if (residency_ == nullptr || !pool_->may_own(word)) return false;
  std::size_t host_pages = 0;
  std::size_t left = 0;
  pool::LaunchedBlock block;
  if (!pool_->use_for_launch(word, reinterpret_cast<std::uintptr_t>(stream), &host_pages, &left, &block)) return false;
  use->brought_back = use->brought_back || host_pages > left;
  use->still_on_host = use->still_on_host || left > 0;
  const bool repeated = std::any_of(use->blocks.begin(), use->blocks.begin() + static_cast<std::ptrdiff_t>(use->count),
                                    [&](const pool::LaunchedBlock& b) { return b.buffer_id == block.buffer_id; });
  if (!repeated && use->count < use->blocks.size()) use->blocks[use->count++] = block;
  return true;
}

void Allocator::end_launch(CUfunction function, const LaunchUse& use) {
  if (residency_ == nullptr) return;
  if (use.brought_back || use.still_on_host) residency_->note_launch(use.brought_back, use.still_on_host);
  if (residency_->learning()) {
    pool_->launched(reinterpret_cast<std::uintptr_t>(function), use.blocks.data(), use.count);
  }
}

}  // namespace tidepool::runtime
