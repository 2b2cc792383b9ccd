// LearnedPrefetch: prefetch:learn's moves, driven by a LaunchSchedule.
//
// Tracked moves. The launch scan sees every block a kernel names, so a
// block no launch has named since a point in the queue is idle on the
// device from that point on, and its pages can move without a gate:
//   - copy out (a precopy): the copies wait (a device barrier, no flag) for
//     everything queued so far; the pages stay mapped on the device. Once the
//     copies are done and the block is still live and unnamed since, an
//     eviction remaps its pages to the host pages: nothing is copied in the
//     gate, and no stream waits.
//   - bring back: a block no launch has named since it was evicted is idle
//     (one some submission read on the host, `read_on_host`, is not);
//     its pages are remapped to device pages at once and filled on the
//     host-to-device stream; the launch that names it next waits for that
//     copy (before_use), and other streams run on.
// A launch that names a block whose precopy is still in flight waits for it
// too, and a freed block's precopy is waited for before its pages can go to
// a new owner: no kernel ever writes pages a copy is reading.
//
// The trust this takes: kernels reach pool memory through pointers in their
// parameters (a pointer read from device memory is not seen), and every
// launch's parameters can be read: the first that cannot (trust_lost) ends
// tracked moves for the run; copies and
// sets are hooked and name their blocks as launches do. Submissions on their
// way to the driver pin their blocks, which are then not moved at all (the
// rule: pool/page_mover.hpp). Programs whose kernels find pool memory through
// device memory should use prefetch:launch, whose moves are gated.
//
// Everything here runs under the pool's lock, except stats().
#pragma once

#include <cuda.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "pool/pool.hpp"
#include "residency/eviction_policy.hpp"
#include "residency/host_cache.hpp"
#include "residency/launch_schedule.hpp"
#include "residency/transit.hpp"
#include "space/space.hpp"

namespace tidepool::residency {

// What learned prefetch moved; Residency adds it to its own figures.
struct LearnedStats {
  std::uint64_t prefetches = 0;  // bring-backs ahead of a predicted launch (each also a learned prefetch)
  std::uint64_t prefetched_bytes = 0;
  std::uint64_t precopies = 0;
  std::uint64_t precopies_used = 0;
  std::uint64_t evictions = 0;  // precopies committed by an eviction
  std::uint64_t evicted_bytes = 0;
  std::uint64_t period = 0;    // launches per step, once found
  std::uint64_t launches = 0;  // launches recorded
  std::array<std::pair<std::uint64_t, std::uint64_t>, LaunchSchedule::kCandidates> candidates{};  // period, run
};

class LearnedPrefetch {
 public:
  // `ahead`: how many launches ahead blocks come back.
  LearnedPrefetch(space::AddressSpace& space, HostCache& cache, Transit& transit, std::size_t ahead);
  LearnedPrefetch(const LearnedPrefetch&) = delete;
  LearnedPrefetch& operator=(const LearnedPrefetch&) = delete;

  // Records a scanned launch. True when moves may follow it (move_ahead):
  // the step is known and the scan listed every block the launch named (a
  // block it missed could be copied out or remapped before the launch is
  // queued).
  bool record(std::uintptr_t kernel, const pool::LaunchedBlock* blocks, std::size_t count, bool all_blocks);
  // After record(): brings back the blocks the next launches use, then
  // copies out, ahead, the blocks needed last, up to what the next launches
  // are predicted to evict. Never a block of the launch just recorded: it is
  // queued only after this returns.
  void move_ahead(pool::LiveBlocks& live);
  // A launch on `stream` is about to use the block: ordered after any copy
  // still bringing its pages back or copying them out.
  void before_use(std::uint64_t buffer_id, std::uintptr_t stream);
  // A launch (or a graph's kernel) the scan could not read may use any
  // block: the host waits for every copy in flight, every precopy is
  // dropped (it may go stale unseen), and record() allows no more moves.
  // True the first time.
  bool trust_lost();
  // The block is being freed.
  void forget(std::uint64_t buffer_id);

  // A demand eviction's first resort: remaps precopied blocks still valid
  // (among `candidates`, unused since, pages still on the device, outside
  // [keep_begin, keep_end)) until `pages` moved; drops stale ones.
  std::size_t commit_for_eviction(std::size_t pages, const std::vector<pool::EvictionCandidate>& candidates,
                                  std::uintptr_t keep_begin, std::uintptr_t keep_end);
  // Pages a demand eviction made spare, for the next step's precopies.
  void note_demand(std::size_t pages) noexcept { schedule_.note_demand(pages); }
  // The victim order once the step is known (Belady's, on last step's
  // order); null before: the configured policy orders.
  [[nodiscard]] const EvictionPolicy* victim_order() const noexcept {
    return schedule_.period() != 0 ? &furthest_next_use_ : nullptr;
  }
  // The events of copies still bringing back `buffer_id`'s pages, appended
  // to `out`: an eviction of the block waits for them.
  void fills_of(std::uint64_t buffer_id, std::vector<CUevent>* out) const;
  // Forgets bring-backs seen finished (every one with `all`: the transit
  // has waited for them); called before the transit reuses their events.
  void forget_finished(bool all);
  // Discards every precopy (their host pages return once the copies end).
  void drain();

  [[nodiscard]] LearnedStats stats() const;
  bool try_stats(std::chrono::steady_clock::time_point deadline, LearnedStats* out) const;

 private:
  struct Precopy {
    std::uintptr_t address = 0;  // the block
    std::uint64_t buffer_id = 0;
    std::uint64_t last_use = 0;  // the block's use clock when copied: a use since makes the copy stale
    std::vector<PageMove> moves;
    CUevent start = nullptr;
    CUevent done = nullptr;
  };
  struct Inflight {
    std::uint64_t buffer_id = 0;
    CUevent done = nullptr;  // the copies bringing its pages back
  };

  void prefetch_upcoming(pool::LiveBlocks& live);
  void precopy_for_demand(pool::LiveBlocks& live);
  // commit_for_eviction's work: with `live`, for room to bring a block back
  // (then blocks the prefetch window is about to bring back are kept).
  std::size_t commit(std::size_t pages, pool::LiveBlocks* live, const std::vector<pool::EvictionCandidate>* candidates,
                     std::uintptr_t keep_begin, std::uintptr_t keep_end);
  void discard_precopy(std::size_t index);
  [[nodiscard]] bool arriving(std::uint64_t id) const;
  [[nodiscard]] bool in_current_launch(std::uint64_t id) const;

  space::AddressSpace& space_;
  HostCache& cache_;
  Transit& transit_;
  const std::size_t ahead_;
  LaunchSchedule schedule_;
  FurthestNextUse furthest_next_use_;

  std::vector<Precopy> precopies_;
  std::size_t precopied_pages_ = 0;
  std::vector<Inflight> inflight_;
  std::vector<ScheduledBlock> upcoming_;
  std::vector<ScheduledBlock> current_;  // the blocks of the launch being scanned
  std::vector<PageMove> moves_;
  std::vector<pool::EvictionCandidate> live_scratch_;
  std::vector<std::pair<std::uint64_t, std::size_t>> ranked_;  // (next use, index into live_scratch_)

  bool blind_ = false;  // a launch the scan could not read was seen: no more tracked moves

  mutable std::mutex stats_lock_;  // counters_ only
  LearnedStats counters_;
};

}  // namespace tidepool::residency
