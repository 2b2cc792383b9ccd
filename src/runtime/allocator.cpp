// Allocator construction (primary context, capabilities, space and pool) and
// the traced paths around the pool's allocate and deallocate, and the
// figures of the out-of-memory message.
#include "runtime/allocator.hpp"

#include "runtime/config.hpp"
#include "runtime/logging.hpp"
#include "runtime/oom_message.hpp"
#include "runtime/trace_recorder.hpp"

namespace tidepool::runtime {

AllocatorOptions allocator_options(const Config& config, int device) {
  AllocatorOptions options;
  options.device = device;
  if (config.device_limit && !config.device_limit->is_percent) {
    options.device_limit = static_cast<std::size_t>(config.device_limit->bytes);
  }
  options.pool.policy = config.policy;
  options.pool.small_size = static_cast<std::size_t>(config.small_size);
  options.pool.hold_slack_percent = config.hold_slack;
  options.pool.free_barrier = config.free_barrier;
  options.evict = config.evict;
  options.residency.host_cache_bytes = static_cast<std::size_t>(config.host_cache);
  options.residency.evict_policy = config.evict_policy;
  options.residency.learn = config.prefetch == PrefetchMode::learn;
  // Only where launches bring pages back; the runtime also needs the
  // preload's hooks in the process (Runtime::allocator_for).
  const bool brought_back_at_launch = config.prefetch == PrefetchMode::launch || config.prefetch == PrefetchMode::learn;
  if (brought_back_at_launch && config.compress != CompressMode::off) {
    options.residency.compress =
        config.compress == CompressMode::zero ? residency::CompressMode::zero : residency::CompressMode::automatic;
  }
  return options;
}

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
  space_options.peers = options.peers;
  space_options.outside_bytes = options.outside_bytes;
  auto space = space::AddressSpace::create(driver, space_options);
  if (!space) return space.status();
  allocator->space_ = std::move(space.value());
  if (options.streams != nullptr) {
    allocator->streams_ = options.streams;
  } else {
    allocator->own_streams_ = std::make_unique<order::StreamRegistry>(api);
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
      if (const std::string& why = allocator->residency_->compression_off_reason(); !why.empty()) {
        log_warn("device {}: compress: {}; evicted pages go raw", options.device, why);
      }
    } else {
      allocator->eviction_off_reason_ = residency.status().message();
    }
  }
  allocator->trace_ = options.trace;
  allocator->call_sites_ = options.call_sites;
  allocator->passthrough_allocations_ = options.passthrough_allocations;
  return allocator;
}

util::Result<std::uintptr_t> Allocator::traced_allocate(std::size_t size, std::uintptr_t stream, bool ordered,
                                                        std::uint16_t owner) {
  auto result = pool_->allocate(size, stream, ordered, owner);
  // Size 0 hands out no block (address 0): nothing to replay.
  if (size != 0) {
    if (result) {
      trace_->record(TraceAction::allocate, result.value(), size, stream, owner);
    } else {
      trace_->record(TraceAction::allocate_failure, 0, size, stream, owner);
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

void Allocator::out_of_memory(std::size_t size, const util::Status& status) noexcept {
  const std::uint64_t nth = oom_failures_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (oom_verbosity(nth) == OomVerbosity::nothing || !logger().should_log(spdlog::level::warn)) return;
  // Every figure from the layers' own counters: the pool's lock and the
  // residency's, each taken once, nothing allocated.
  const pool::PoolStats s = pool_->stats(/*with_fragmentation=*/true);
  OomFigures f;
  f.device = device_;
  f.requested = size;
  f.reason = status.message();
  f.device_limit = space_->device_limit();
  f.device_total = device_total_bytes();
  f.live_bytes = s.live_bytes;
  f.live_blocks = s.live_blocks;
  f.reserved_bytes = s.reserved_bytes;
  f.free_bytes = s.free_bytes;
  f.largest_free_block = s.largest_free_block;
  f.vmm = space_->uses_vmm();
  if (residency_ != nullptr) {
    const residency::ResidencyStats r = residency_->stats();
    f.eviction = true;
    f.evicted_bytes = r.host_resident_bytes;
    f.host_cache_bytes = r.host_cache_bytes;
    f.host_cache_limit = r.host_cache_limit_bytes;
    f.host_cache_full = r.host_cache_full;
  } else if (!eviction_off_reason_.empty()) {
    f.eviction_off = eviction_off_reason_.c_str();
  }
  if (passthrough_allocations_ != nullptr) {
    f.passthrough_allocations = passthrough_allocations_->load(std::memory_order_relaxed);
  }
  f.failures = nth;
  log_out_of_memory(f);
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

bool Allocator::use_in_launch(std::span<pool::SubmittedWord> words, CUstream stream, LaunchUse* use, pool::Pins* pins,
                              pool::Pool::OnHost on_host) {
  if (residency_ == nullptr || words.empty()) return false;
  const auto on = reinterpret_cast<std::uintptr_t>(stream);
  if (pool_->use_for_submission(words, on, on_host, pins) == 0) return false;
  use->pins = pins;
  const bool later = on_host == pool::Pool::OnHost::bring_back_later;
  for (const pool::SubmittedWord& word : words) {
    if (!word.found) continue;
    if (!later) use->note_pages(word.host_pages, word.still_on_host);
    // Each block once: its pin tells a block this launch named before. A
    // block past Pins::kMax (the pins are shared by every pool the launch
    // names) is neither listed nor brought back (see use_for_submission),
    // and the list is then incomplete.
    if (!word.pinned_block) {
      if (pins->overflow && !pins->holds(word.block.buffer_id)) use->overflow = true;
      continue;
    }
    if (use->count < use->blocks.size()) {
      use->blocks[use->count++] = word.block;
      if (later) use->deferred_pages += word.host_pages;
      continue;
    }
    use->overflow = true;
    if (later && word.host_pages > 0) {
      // Beyond the list: brought back now, the launch's blocks spared all the
      // same (they were all used since the first).
      const auto pages = pool_->bring_back_for_launch(&word.block, 1, on, use->blocks[0].used_at, *pins);
      use->note_pages(pages.before, pages.after);
    }
  }
  return true;
}

bool Allocator::use_in_copy(std::uintptr_t address, CUstream stream, pool::Pins* pins, pool::Pool::OnHost on_host) {
  if (residency_ == nullptr || !pool_->may_own(address)) return false;
  std::size_t host_pages = 0;
  std::size_t left = 0;
  pool::LaunchedBlock block{};
  return pool_->use_for_submission(address, reinterpret_cast<std::uintptr_t>(stream), on_host, pins, &block,
                                   &host_pages, &left);
}

void Allocator::end_launch(CUfunction function, LaunchUse& use, CUstream stream) {
  if (residency_ == nullptr) return;
  if (use.pins != nullptr && use.pins->overflow) pins_overflowed();
  if (use.deferred_pages > 0) {
    const auto pages = pool_->bring_back_for_launch(
        use.blocks.data(), use.count, reinterpret_cast<std::uintptr_t>(stream), use.blocks[0].used_at, *use.pins);
    use.note_pages(pages.before, pages.after);
    use.deferred_pages = 0;
  }
  if (use.brought_back || use.still_on_host) residency_->note_launch(use.brought_back, use.still_on_host);
  if (residency_->learning()) {
    pool_->launched(reinterpret_cast<std::uintptr_t>(function), use.blocks.data(), use.count, !use.overflow);
  }
}

void Allocator::pins_overflowed() {
  // Blocks past Pins::kMax are not pinned: one could be evicted before the
  // launch is queued, and a compressed page cannot be read where it lies.
  if (residency_ != nullptr && (residency_->compressing() || residency_->has_unreadable_pages())) unread_launch();
}

void Allocator::unread_launch() {
  if (residency_ == nullptr) return;
  // Pages left compressed (an unpack that failed before) are tried again.
  const bool unreadable = residency_->has_unreadable_pages();
  if (!unreadable &&
      ((!residency_->learning() && !residency_->compressing()) || scan_distrusted_.load(std::memory_order_acquire))) {
    return;
  }
  const bool compressing = residency_->compressing();
  const bool first = pool_->unread_launch();
  scan_distrusted_.store(true, std::memory_order_release);
  if (first && compressing) {
    log_warn(
        "device {}: compress: a kernel launch's parameters could not be read (the driver does not describe the "
        "kernel); every compressed page was unpacked, and evicted pages go raw for the rest of the run",
        device_);
  }
  if (first && residency_->learning()) {
    log_warn(
        "device {}: prefetch:learn: a kernel launch's parameters could not be read (the driver does not describe "
        "the kernel); learned moves are off for the rest of the run, and blocks move only through gates, as with "
        "prefetch:launch",
        device_);
  }
}

util::Status Allocator::set_peer_access(int peer, bool enabled) {
  driver::ScopedContext scope(driver_->api(), context_);
  util::Status status = pool_->set_peer_access(peer, enabled);
  if (!status) {
    log_warn("device {}: {} device {}'s access to the pool failed: {}", device_, enabled ? "granting" : "revoking",
             peer, status.message());
  }
  return status;
}

util::Status Allocator::set_device_limit(std::size_t bytes) {
  util::Status status;
  if (const char* problem = budget_problem(bytes, device_total_bytes())) {
    status = util::Status(util::Error::invalid_value, problem);
  } else {
    status = pool_->set_device_limit(bytes);
  }
  if (!status) {
    log_warn("device {}: a budget of {} ({} bytes) refused: {}", device_, util::format_size(bytes), bytes,
             status.message());
  }
  return status;
}

}  // namespace tidepool::runtime
