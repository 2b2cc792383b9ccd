// Allocator: tidepool for one device. It retains the device's primary
// context, owns the device's AddressSpace and Pool, and is what every front
// (C API, preload hooks, pluggable allocator, replay) calls. It adds nothing
// to the pool's policy: statistics, tracing and budgets wrap it.
//
// Tracing wraps the pool's calls, never its search: with a TraceRecorder, an
// allocation is recorded after the pool returns it (or refuses it), and a free
// before the block goes back, so no address is ever recorded as allocated
// twice without a free between. Without one the calls go straight through.
//
// An allocation that fails for lack of memory logs the out-of-memory message
// (oom_message.hpp) from a cold function: the hot path pays one test of the
// result, and the message's figures are gathered only when it failed.
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "driver/driver.hpp"
#include "order/order.hpp"
#include "pool/pool.hpp"
#include "residency/residency.hpp"
#include "runtime/call_sites.hpp"
#include "space/space.hpp"
#include "util/util.hpp"

namespace tidepool::runtime {

class TraceRecorder;

struct AllocatorOptions {
  int device = 0;
  std::size_t device_limit = 0;  // 0: what the device reports
  bool use_vmm = true;
  // Devices with peer access to this one's memory, one bit each
  // (space::AddressSpace::set_peer_access).
  std::uint64_t peers = 0;
  // Device bytes the process holds outside every pool (ForeignMemory), counted
  // against device_limit (not owned; outlives the allocator). Null: none.
  const std::atomic<std::size_t>* outside_bytes = nullptr;
  pool::PoolOptions pool;
  TraceRecorder* trace = nullptr;  // not owned; outlives the allocator
  // Who asks for memory: each allocation's caller is tagged here for the
  // pool's bytes by owner (not owned; outlives the allocator). Null: every
  // allocation is owner 0, "not known".
  CallSites* call_sites = nullptr;
  // The process's streams (not owned; outlives the allocator). Null: the
  // allocator keeps a registry of its own, fed by stream_created() and
  // stream_destroying(), which is not known complete until set so.
  order::StreamRegistry* streams = nullptr;
  // Eviction under the budget (residency/). When the device cannot do it,
  // the allocator runs without and eviction_off_reason() says why.
  bool evict = false;
  residency::ResidencyOptions residency;
  // The Runtime's count of this device's allocations passed to the driver
  // (not owned; outlives the allocator), for the out-of-memory message.
  const std::atomic<std::uint64_t>* passthrough_allocations = nullptr;
};

struct Config;
// What TIDEPOOL_CONF gives device `device`'s allocator: every option's
// value, the table's default where the configuration names none. A budget
// given as a percentage is left at 0 (it needs the device's size), and the
// trace, streams and counters are the Runtime's to set.
AllocatorOptions allocator_options(const Config& config, int device);

// What one scanned kernel launch named of an allocator's pool.
struct LaunchUse {
  static constexpr std::size_t kMaxBlocks = 12;
  // Only the first `count` are set: a launch does not pay to clear the rest.
  std::array<pool::LaunchedBlock, kMaxBlocks> blocks;
  std::size_t count = 0;
  bool brought_back = false;         // some pages came back before the launch
  bool still_on_host = false;        // some stay on the host: the launch reads them there
  std::size_t deferred_pages = 0;    // host pages of blocks[] that end_launch brings back
  bool overflow = false;             // the launch named more blocks than blocks[] holds
  const pool::Pins* pins = nullptr;  // the launch's pins (use_in_launch sets it)
  // A bring-back found `before` host pages and left `after` of them.
  void note_pages(std::size_t before, std::size_t after) noexcept {
    brought_back = brought_back || after < before;
    still_on_host = still_on_host || after > 0;
  }
};

class Allocator {
 public:
  static util::Result<std::unique_ptr<Allocator>> create(const driver::Driver& driver, const AllocatorOptions& options);
  ~Allocator();
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // `caller`: the return address of the call that asked (0: not known),
  // for the report's owners and the trace's Owner column.
  util::Result<std::uintptr_t> allocate(std::size_t size, std::uintptr_t stream, bool ordered,
                                        std::uintptr_t caller = 0) {
    const std::uint16_t owner = call_sites_ != nullptr ? call_sites_->tag(caller) : 0;
    util::Result<std::uintptr_t> result = trace_ != nullptr ? traced_allocate(size, stream, ordered, owner)
                                                            : pool_->allocate(size, stream, ordered, owner);
    if (!result.ok()) [[unlikely]] {
      if (result.status().error() == util::Error::out_of_memory) out_of_memory(size, result.status());
    }
    return result;
  }
  util::Status deallocate(std::uintptr_t address, std::uintptr_t stream, bool ordered) {
    if (trace_ != nullptr) return traced_deallocate(address, stream, ordered);
    return pool_->deallocate(address, stream, ordered);
  }

  // A stream was created / is about to be destroyed: tells the registry and
  // the pool (the Runtime does this for every allocator at once).
  void stream_created(CUstream stream) { streams_->created(stream); }
  void stream_destroying(CUstream stream) {
    const bool retired = streams_->destroying(stream);
    pool_->stream_destroyed(reinterpret_cast<std::uintptr_t>(stream), retired);
  }
  [[nodiscard]] order::StreamRegistry& streams() noexcept { return *streams_; }

  [[nodiscard]] int device() const noexcept { return device_; }
  [[nodiscard]] CUcontext context() const noexcept { return context_; }
  [[nodiscard]] pool::Pool& pool() noexcept { return *pool_; }
  [[nodiscard]] const pool::Pool& pool() const noexcept { return *pool_; }
  [[nodiscard]] const space::AddressSpace& space() const noexcept { return *space_; }
  [[nodiscard]] std::size_t device_total_bytes() const noexcept { return space_->capabilities().total_bytes; }
  // A new budget: checked against the device by the rule TIDEPOOL_CONF's
  // device_limit follows (invalid_value), then set as Pool::set_device_limit
  // says (lowered below what cannot leave the device: out_of_memory, the old
  // budget kept). A refusal is logged with its reason.
  util::Status set_device_limit(std::size_t bytes);
  // Device `peer` may now (or may no longer) reach this device's memory:
  // every pool page, mapped now or later, grants it access (or stops).
  util::Status set_peer_access(int peer, bool enabled);
  [[nodiscard]] TraceRecorder* trace() const noexcept { return trace_; }
  // Null without eviction.
  [[nodiscard]] const residency::Residency* residency() const noexcept { return residency_.get(); }
  [[nodiscard]] residency::Residency* residency() noexcept { return residency_.get(); }
  [[nodiscard]] const std::string& eviction_off_reason() const noexcept { return eviction_off_reason_; }
  // Allocations that failed with out_of_memory (the pool's `ooms` also
  // counts those refused before the pool was asked).
  [[nodiscard]] std::uint64_t out_of_memory_failures() const noexcept {
    return oom_failures_.load(std::memory_order_relaxed);
  }

  // With eviction on. A launch on `stream` passes `word`: if it points into
  // a live block, the block is marked used, pinned into `pins` until the
  // launch is queued (release_pins) and added to `use`; false when this pool
  // has no such block. Its host pages come back as `on_host` says:
  // bring_back_later, in end_launch, with the launch's other blocks spared
  // from the eviction that makes room (prefetch:launch/learn);
  // bring_back_now, for a pool whose end_launch is not called (a launch's
  // blocks on another device); read_there (prefetch off or hints). A block
  // beyond `use`'s list comes back now too, the launch's blocks spared all
  // the same.
  bool use_in_launch(std::uintptr_t word, CUstream stream, LaunchUse* use, pool::Pins* pins,
                     pool::Pool::OnHost on_host) {
    pool::SubmittedWord one{};
    one.address = word;
    return use_in_launch(std::span<pool::SubmittedWord>(&one, 1), stream, use, pins, on_host);
  }
  // The same for each of `words` (their `address` set; the pool fills in the
  // rest), under one hold of the pool's lock; true when any of them points
  // into a live block.
  bool use_in_launch(std::span<pool::SubmittedWord> words, CUstream stream, LaunchUse* use, pool::Pins* pins,
                     pool::Pool::OnHost on_host);
  // A copy or set on `stream` touches `address`: as use_in_launch (never
  // bring_back_later).
  bool use_in_copy(std::uintptr_t address, CUstream stream, pool::Pins* pins, pool::Pool::OnHost on_host);
  // A submission named more blocks than it could pin (pool::Pins::kMax).
  void pins_overflowed();
  // The submission that took `pins` has been queued.
  void release_pins(const pool::Pins& pins) { pool_->release_pins(pins); }
  // Where words the launch scan passes to use_in_launch must lie: empty
  // without eviction. A launch takes it once, so that most of its words
  // (not this pool's) cost two compares.
  [[nodiscard]] std::pair<std::uintptr_t, std::uintptr_t> launch_span() const noexcept {
    if (residency_ == nullptr) return {0, 0};
    return pool_->span();
  }
  // The launch's words are all seen: the host pages of its blocks come back
  // (before work queued later on `stream`), then the counters and the
  // schedule of prefetch:learn.
  void end_launch(CUfunction function, LaunchUse& use, CUstream stream);
  // A launch (or an instantiated graph's kernel) whose parameters the scan
  // could not read: it may use any block, so learned prefetch stops
  // trusting the scan. After the first, a load.
  void unread_launch();

 private:
  Allocator() = default;
  util::Result<std::uintptr_t> traced_allocate(std::size_t size, std::uintptr_t stream, bool ordered,
                                               std::uint16_t owner);
  util::Status traced_deallocate(std::uintptr_t address, std::uintptr_t stream, bool ordered);
  // Counts the failure and logs the out-of-memory message, as often as its
  // rate allows. Off the hot path; allocates nothing.
  [[gnu::cold, gnu::noinline]] void out_of_memory(std::size_t size, const util::Status& status) noexcept;
  const driver::Driver* driver_ = nullptr;
  int device_ = 0;
  CUdevice cu_device_ = 0;
  CUcontext context_ = nullptr;
  std::unique_ptr<order::StreamRegistry> own_streams_;
  order::StreamRegistry* streams_ = nullptr;
  std::unique_ptr<space::AddressSpace> space_;
  std::unique_ptr<residency::Residency> residency_;  // outlives the pool, which calls it
  std::string eviction_off_reason_;
  std::unique_ptr<pool::Pool> pool_;
  TraceRecorder* trace_ = nullptr;
  CallSites* call_sites_ = nullptr;
  const std::atomic<std::uint64_t>* passthrough_allocations_ = nullptr;
  std::atomic<std::uint64_t> oom_failures_{0};
  std::atomic<bool> scan_distrusted_{false};  // unread_launch() has turned learned moves off
};

// One submission (a kernel launch, a copy, a set) on its way to the driver,
// in the hook's frame: the blocks it pinned and the allocators holding them,
// released together once the driver call has returned
// (Runtime::after_submission). Nothing here is initialised beyond the counts.
struct Submission {
  static constexpr std::size_t kMaxOwners = 64;  // Runtime's kMaxDevices
  pool::Pins pins;
  Allocator*
      owner[kMaxOwners];  // NOLINT(cppcoreguidelines-avoid-c-arrays,modernize-avoid-c-arrays): the first `owners`
  std::size_t owners = 0;
  bool overflow_reported = false;  // Runtime::before_copy has told the pools pins.overflow
  void note(Allocator* a) noexcept {
    for (std::size_t i = 0; i < owners; ++i) {
      if (owner[i] == a) return;
    }
    if (owners < kMaxOwners) owner[owners++] = a;
  }
};

}  // namespace tidepool::runtime
