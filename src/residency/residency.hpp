// The residency layer's one header: moving the pages of live blocks between
// the device and a pinned host cache, so that a program whose live data is
// larger than its device budget keeps running, with the same pointers.
//
// Residency implements the pool's PageMover. The pool decides when (an
// allocation short of budget after free memory is used up, a hint, a block
// handed out over host pages) and keeps the use bookkeeping; Residency
// decides which pages (an EvictionPolicy over the pool's candidates), where
// they go (HostCache) and how they move (Transit: copies on dedicated
// streams behind a device gate). An evicted page is a host page mapped at the
// same device address: a kernel that touches it still runs, reading over
// PCIe, and nothing is lost.
//
// Eviction unit: the device page. Only pages lying wholly inside one live
// block are evicted, so a host page always holds the bytes of one block (or
// of free space, after that block is freed): blocks smaller than a page,
// and a block's end pages shared with neighbours, stay on the device.
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "driver/driver.hpp"
#include "order/order.hpp"
#include "pool/pool.hpp"
#include "residency/compressor.hpp"
#include "residency/eviction_policy.hpp"
#include "residency/host_cache.hpp"
#include "residency/launch_scan.hpp"
#include "residency/learned_prefetch.hpp"
#include "residency/transit.hpp"
#include "space/space.hpp"
#include "util/util.hpp"

namespace tidepool::residency {

struct ResidencyOptions {
  std::size_t host_cache_bytes = 0;  // 0: default_host_cache_bytes()
  std::string evict_policy = "lru";
  // Pages moved per eviction at least: each move is a gate that drains the
  // device's queue, so evictions come in batches rather than page by page.
  std::size_t min_evict_pages = 8;
  // prefetch:learn: keep a LaunchSchedule, bring blocks back `learn_ahead`
  // launches before they are used, and copy out ahead what the next
  // launches' allocations will evict, all as tracked moves.
  bool learn = false;
  std::size_t learn_ahead = 4;
  // Compressed eviction (compressor.hpp). Only for an owner that sees every
  // launch, copy and set (the preload's launch scan with prefetch:launch or
  // learn), since a compressed page cannot be read where it lies.
  CompressMode compress = CompressMode::off;
};

struct ResidencyStats {
  std::uint64_t evictions = 0;  // eviction batches that moved pages
  std::uint64_t evicted_bytes = 0;
  std::uint64_t prefetches = 0;  // bring-backs that moved pages
  std::uint64_t prefetched_bytes = 0;
  // Launches that read host pages: every one with prefetch:off, those with
  // no room to bring them back with launch or learn.
  std::uint64_t host_resident_launches = 0;
  std::uint64_t launch_prefetches = 0;    // launches whose blocks' host pages were brought back first
  std::uint64_t host_resident_bytes = 0;  // pool bytes on host pages now
  std::uint64_t host_cache_bytes = 0;     // pinned now
  std::uint64_t host_cache_peak_bytes = 0;
  std::uint64_t host_cache_limit_bytes = 0;
  std::uint64_t peak_evicted_bytes = 0;  // host pages in use at the peak
  std::uint64_t pin_calls = 0;
  std::uint64_t sync_pins = 0;  // pinned on an allocating thread
  std::uint64_t gates = 0;
  std::uint64_t fallbacks = 0;
  std::uint64_t tracked_moves = 0;       // moves without a gate (prefetch:learn)
  std::uint64_t learned_prefetches = 0;  // blocks brought back ahead of the launch predicted to use them
  std::uint64_t precopies = 0;           // blocks copied out ahead of a predicted eviction
  std::uint64_t precopies_used = 0;      // of them, evicted without another copy
  std::uint64_t learned_period = 0;      // launches per step, once found
  std::uint64_t learned_launches = 0;    // launches the schedule recorded
  // The periods prefetch:learn was trying at the last launch, with how many
  // launches in a row each had matched ({0, 0}: an empty slot).
  std::array<std::pair<std::uint64_t, std::uint64_t>, LaunchSchedule::kCandidates> learned_candidates{};
  std::uint64_t failed_moves = 0;
  std::uint64_t host_cache_full = 0;  // evictions cut short by the host cache's bound
  // Host time, on the threads that moved pages: waiting for the device,
  // remapping pages, and pinning host pages the cache did not have ready.
  double move_wait_ms = 0;
  double remap_ms = 0;
  double sync_pin_ms = 0;
  double to_host_gbps = 0;  // copy bandwidth where events timed it, GB/s
  double to_device_gbps = 0;
  bool compressing = false;  // compressed eviction on now
  CompressStats compression;
};

class Residency final : public pool::PageMover {
 public:
  // not_supported (with the reason) when the device cannot hold pool pages
  // on the host: no VMM, no host-located VMM, a failed trial page.
  static util::Result<std::unique_ptr<Residency>> create(const driver::Driver& driver, CUcontext context,
                                                         space::AddressSpace& space, order::StreamRegistry& streams,
                                                         const ResidencyOptions& options);
  ~Residency() override;
  Residency(const Residency&) = delete;
  Residency& operator=(const Residency&) = delete;

  // pool::PageMover, under the pool's lock.
  std::size_t evict(std::vector<pool::EvictionCandidate>& candidates, std::size_t pages, std::uintptr_t keep_begin,
                    std::uintptr_t keep_end) override;
  util::Status bring_back(space::Reservation& reservation, std::uintptr_t address, std::size_t length,
                          std::uintptr_t stream) override;
  void collect_released_host_pages() override;
  [[nodiscard]] bool has_unreadable_pages() const override {
    return compressor_ != nullptr && compressor_->compressed_now() > 0;
  }
  void make_readable(space::Reservation& reservation, std::uintptr_t address, std::size_t length) override;
  void launched(std::uintptr_t kernel, const pool::LaunchedBlock* blocks, std::size_t count, bool all_blocks,
                pool::LiveBlocks& live) override;
  void before_use(std::uint64_t buffer_id, std::uintptr_t stream) override;
  bool unread_launch() override;
  [[nodiscard]] bool orders_uses() const override { return learned_ != nullptr; }
  void forget(std::uint64_t buffer_id) override;
  void wait_for_copies_in() override { transit_->wait_for_copies_in(); }
  [[nodiscard]] std::vector<CUstream> own_streams() const override { return transit_->streams(); }

  // Waits for the copies still in flight (before the pool unmaps its pages).
  void drain();
  [[nodiscard]] ResidencyStats stats() const;
  // stats(), unless one of its locks is still held at `deadline` (false,
  // nothing read): for the exit report, which must never wait forever. The
  // out-of-memory message reads these outside the pool's lock, so a signal
  // can land while a thread holds them.
  bool try_stats(std::chrono::steady_clock::time_point deadline, ResidencyStats* out) const;
  // A scanned launch (any prefetch mode) found pages of its blocks on the
  // host: `brought_back` some came back before it, `still_on_host` some
  // stay there and it reads them over PCIe.
  void note_launch(bool brought_back, bool still_on_host) noexcept {
    if (brought_back) launch_prefetches_.fetch_add(1, std::memory_order_relaxed);
    if (still_on_host) host_resident_launches_.fetch_add(1, std::memory_order_relaxed);
  }
  [[nodiscard]] bool learning() const noexcept { return learned_ != nullptr; }
  [[nodiscard]] bool compressing() const noexcept { return compressor_ != nullptr && compressor_->on(); }
  // Why compression asked for is off (empty when it is on or was not asked).
  [[nodiscard]] const std::string& compression_off_reason() const noexcept { return compress_off_reason_; }
  [[nodiscard]] std::string_view policy_name() const { return policy_->name(); }

 private:
  Residency(space::AddressSpace& space, std::unique_ptr<HostCache> cache, std::unique_ptr<Transit> transit,
            std::unique_ptr<EvictionPolicy> policy, const ResidencyOptions& options);
  void return_pages(std::vector<space::HostPage*> pages);
  void release(space::HostPage* page);  // to the compressor (compressed or raw) or the cache
  // A compressed page unpacked where it lies, or brought back where that fails.
  void make_page_readable(space::Reservation& reservation, std::size_t p);
  // Inflight copies that finished are dropped, then the transit's finished
  // copies give their host pages back (in that order: reaped events are reused).
  void reap_transit(bool wait);
  void note_transit_stats();  // under stats_lock_ and the pool's lock
  // The figures that do not come from counters_: learned prefetch's, the
  // cache's and the atomics.
  void complete_stats(const LearnedStats& learned, const HostCacheStats& cache, ResidencyStats* s) const;

  space::AddressSpace& space_;
  std::unique_ptr<HostCache> cache_;
  std::unique_ptr<Transit> transit_;
  std::unique_ptr<EvictionPolicy> policy_;
  ResidencyOptions options_;

  std::atomic<std::uint64_t> launch_prefetches_{0};
  std::atomic<std::uint64_t> host_resident_launches_{0};
  mutable std::mutex stats_lock_;  // the counters below; the rest is under the pool's lock
  ResidencyStats counters_;
  std::vector<RankedBlock> ordered_;  // evict()'s scratch
  std::vector<PageMove> moves_;
  std::vector<CUevent> fills_;  // evict()'s scratch

  std::unique_ptr<LearnedPrefetch> learned_;  // prefetch:learn; under the pool's lock
  std::unique_ptr<Compressor> compressor_;    // compress:zero or auto, where it could be made
  std::string compress_off_reason_;
};

}  // namespace tidepool::residency
