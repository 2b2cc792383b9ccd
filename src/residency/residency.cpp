// Residency: which pages move, to which host pages, and the counters. See
// residency.hpp; the moves themselves are transit.cpp's.
#include "residency/residency.hpp"

#include <algorithm>
#include <array>

namespace tidepool::residency {

util::Result<std::unique_ptr<Residency>> Residency::create(const driver::Driver& driver, CUcontext context,
                                                           space::AddressSpace& space, order::StreamRegistry& streams,
                                                           const ResidencyOptions& options) {
  auto policy = make_eviction_policy(options.evict_policy);
  if (!policy) return util::Status(util::Error::bad_config, "unknown eviction policy");
  if (!space.uses_vmm()) {
    return util::Status(util::Error::not_supported, "the pool has no virtual memory management (cuMemAlloc chunks)");
  }
  const std::size_t limit = options.host_cache_bytes != 0 ? options.host_cache_bytes : default_host_cache_bytes();
  auto cache = HostCache::create(driver, context, space.capabilities(), space.page_size(), limit);
  if (!cache) return cache.status();
  auto transit = Transit::create(driver, context, streams, space.page_size());
  if (!transit) return transit.status();
  return std::unique_ptr<Residency>(
      new Residency(space, std::move(cache).value(), std::move(transit).value(), std::move(policy), options));
}

Residency::Residency(space::AddressSpace& space, std::unique_ptr<HostCache> cache, std::unique_ptr<Transit> transit,
                     std::unique_ptr<EvictionPolicy> policy, const ResidencyOptions& options)
    : space_(space),
      cache_(std::move(cache)),
      transit_(std::move(transit)),
      policy_(std::move(policy)),
      options_(options) {
  if (options_.learn) schedule_ = std::make_unique<LaunchSchedule>();
}

Residency::~Residency() { drain(); }

void Residency::drain() {
  // Copies into pool pages still in flight finish before anything unmaps them.
  while (!precopies_.empty()) discard_precopy(precopies_.size() - 1);
  reap_transit(true);
}

void Residency::reap_transit(bool wait) {
  if (wait) {
    inflight_.clear();
  } else {
    std::erase_if(inflight_, [&](const Inflight& f) { return transit_->finished(f.done); });
  }
  return_pages(transit_->reap(wait));
}

void Residency::return_pages(std::vector<space::HostPage*> pages) {
  for (space::HostPage* page : pages) cache_->give(page);
}

void Residency::collect_released_host_pages() {
  return_pages(space_.take_released_host_pages());
  reap_transit(false);
  std::lock_guard<std::mutex> guard(stats_lock_);
  note_transit_stats();
}

std::size_t Residency::evict(std::vector<pool::EvictionCandidate>& candidates, std::size_t pages,
                             std::uintptr_t keep_begin, std::uintptr_t keep_end) {
  collect_released_host_pages();
  std::size_t committed = 0;
  if (schedule_ != nullptr) {
    committed = commit_precopies(pages, nullptr, &candidates, keep_begin, keep_end);
    if (committed >= pages) {
      // What an eviction made spare, not what it asked for: precopies are
      // committed a whole block at a time, and the next step's precopies
      // must cover what this step's evictions really moved.
      schedule_->note_demand(committed);
      return committed;
    }
    pages -= committed;
  }
  const std::size_t page_size = space_.page_size();
  const auto kept = [&](std::uintptr_t at) { return at < keep_end && at + page_size > keep_begin; };
  ordered_.clear();
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const pool::EvictionCandidate& c = candidates[i];
    const auto [first, end] = c.reservation->whole_pages(c.address, c.size);
    std::size_t on_device = 0;
    for (std::size_t p = first; p < end; ++p) {
      if (c.reservation->page(p).residency == space::Residency::device && !kept(c.reservation->page_address(p))) {
        ++on_device;
      }
    }
    if (on_device > 0) ordered_.push_back({c.address, c.size, c.last_use, on_device, i});
  }
  if (schedule_ != nullptr && schedule_->period() != 0) {
    order_by_next_use(candidates);
  } else {
    policy_->order(ordered_);
  }

  // A batch of at least min_evict_pages, but never more than a sixteenth of
  // the budget beyond what was asked: a small budget evicts only what it needs.
  const std::size_t budget_pages = space_.device_limit() / page_size;
  const std::size_t target = std::max(pages, std::min(options_.min_evict_pages, budget_pages / 16));
  moves_.clear();
  bool cache_full = false;
  fills_.clear();  // tracked bring-backs that may still be writing a chosen block's pages
  for (const RankedBlock& c : ordered_) {
    space::Reservation& r = *candidates[c.source].reservation;
    const auto [first, end] = r.whole_pages(c.address, c.size);
    for (const Inflight& f : inflight_) {
      if (f.buffer_id == candidates[c.source].buffer_id) fills_.push_back(f.done);
    }
    for (std::size_t p = first; p < end && moves_.size() < target; ++p) {
      if (r.page(p).residency != space::Residency::device || kept(r.page_address(p))) continue;
      space::HostPage* host = cache_->take();
      if (host == nullptr) {
        cache_full = true;
        break;
      }
      moves_.push_back({&r, p, host, false});
    }
    if (cache_full || moves_.size() >= target) break;
  }
  const std::size_t moved = transit_->to_host(space_, moves_, fills_);
  for (const PageMove& m : moves_) {
    // A page left mapped at the pool address (a move that failed halfway)
    // stays with the space, which hands it back when it unmaps it.
    if (!m.moved && m.host->current.reservation == nullptr) cache_->give(m.host);
  }
  if (schedule_ != nullptr) schedule_->note_demand(moved + committed);
  std::lock_guard<std::mutex> guard(stats_lock_);
  note_transit_stats();
  if (cache_full) counters_.host_cache_full++;
  if (moved > 0) {
    counters_.evictions++;
    counters_.evicted_bytes += moved * page_size;
  }
  return moved + committed;
}

util::Status Residency::bring_back(space::Reservation& reservation, std::uintptr_t address, std::size_t length,
                                   std::uintptr_t /*stream*/) {
  collect_released_host_pages();
  if (length == 0) return util::Status::success();
  moves_.clear();
  const std::size_t last = reservation.page_of(address + length - 1);
  for (std::size_t p = reservation.page_of(address); p <= last; ++p) {
    if (reservation.page(p).residency == space::Residency::host) {
      moves_.push_back({&reservation, p, reservation.page(p).host, false});
    }
  }
  if (moves_.empty()) return util::Status::success();
  // Only as many as the budget lets back; the rest stay on the host, where
  // they are still correct.
  if (moves_.size() > space_.available_pages()) moves_.resize(space_.available_pages());
  const std::size_t wanted = moves_.size();
  const std::size_t moved = transit_->to_device(space_, moves_);
  reap_transit(false);
  {
    std::lock_guard<std::mutex> guard(stats_lock_);
    note_transit_stats();
    if (moved > 0) {
      counters_.prefetches++;
      counters_.prefetched_bytes += moved * space_.page_size();
    }
  }
  if (moved < wanted || wanted == 0) {
    return {util::Error::out_of_memory, "some pages stay on the host: the device budget has no room for them"};
  }
  return util::Status::success();
}

void Residency::note_transit_stats() {
  const TransitStats& t = transit_->stats();
  counters_.gates = t.gates;
  counters_.fallbacks = t.fallbacks;
  counters_.tracked_moves = t.tracked;
  if (schedule_ != nullptr) counters_.learned_period = schedule_->period();
  counters_.failed_moves = t.failed_moves;
  // Bytes per millisecond / 1e6 is GB/s.
  counters_.to_host_gbps = t.to_host_ms > 0 ? static_cast<double>(t.timed_to_host_bytes) / t.to_host_ms / 1e6 : 0;
  counters_.to_device_gbps =
      t.to_device_ms > 0 ? static_cast<double>(t.timed_to_device_bytes) / t.to_device_ms / 1e6 : 0;
}

// --- prefetch:learn --------------------------------------------------------------------------------
//
// Tracked moves. The launch scan sees every block a kernel names, so a
// block no launch has named since a point in the queue is idle on the
// device from that point on, and its pages can move without a gate:
//   - copy out: the copies wait (a device barrier, no flag) for everything
//     queued so far; the pages stay mapped on the device. Once the copies
//     are done and the block is still live and unnamed since, its pages are
//     remapped to the host pages: nothing is copied in the gate, and no
//     stream waits.
//   - bring back: a block no launch has named since it was evicted is idle;
//     its pages are remapped to device pages at once and filled on the
//     host-to-device stream; the launch that names it next waits for that
//     copy (before_use), and other streams run on.
// The trust this takes: kernels reach pool memory through pointers in their
// parameters (a pointer read from device memory is not seen), and no copy
// or memset writes a block between its copy-out and its remap. Programs that
// break it should use prefetch:launch, whose moves are gated.

void Residency::launched(std::uintptr_t kernel, const pool::LaunchedBlock* blocks, std::size_t count, bool all_blocks,
                         pool::LiveBlocks& live) {
  if (schedule_ == nullptr) return;
  std::array<ScheduledBlock, LaunchSchedule::kMaxBlocksPerLaunch> scheduled;
  const std::size_t n = std::min(count, scheduled.size());
  for (std::size_t i = 0; i < n; ++i) scheduled[i] = ScheduledBlock{blocks[i].buffer_id, blocks[i].address};
  schedule_->record(kernel, scheduled.data(), n);
  // A block this launch names but the list lacks could be copied out or
  // remapped before the launch is queued: nothing moves until the next one.
  if (schedule_->period() == 0 || !all_blocks) return;
  // The blocks of this launch are neither brought back nor copied out now:
  // the launch itself is queued only after this returns, so a copy ordered
  // before it would miss its writes, and a page remapped now would be read
  // before its bytes arrive.
  current_.clear();
  for (std::size_t i = 0; i < count; ++i) current_.push_back(ScheduledBlock{blocks[i].buffer_id, blocks[i].address});
  collect_released_host_pages();
  prefetch_upcoming(live);
  precopy_for_demand(live);
  std::lock_guard<std::mutex> guard(stats_lock_);
  note_transit_stats();
}

void Residency::prefetch_upcoming(pool::LiveBlocks& live) {
  if (space_.host_pages() == 0) return;
  schedule_->upcoming(options_.learn_ahead, &upcoming_);
  for (const ScheduledBlock& b : upcoming_) {
    pool::EvictionCandidate c;
    if (in_current_launch(b.id) || !live.find(b.address, &c) || c.buffer_id != b.id) continue;
    moves_.clear();
    const std::size_t last = c.reservation->page_of(c.address + c.size - 1);
    for (std::size_t p = c.reservation->page_of(c.address); p <= last; ++p) {
      if (c.reservation->page(p).residency == space::Residency::host) {
        moves_.push_back({c.reservation, p, c.reservation->page(p).host, false});
      }
    }
    if (moves_.empty()) continue;
    // Room, cheapest first: idle pages of free blocks; then pages of blocks
    // freed before the launch being scanned, the host waiting (under the
    // pool's lock) for the work queued before the device barrier that put
    // them back, never for work queued after that barrier; then precopied
    // blocks, whose pages are already on the host.
    for (const bool wait : {false, true}) {
      if (space_.available_pages() < moves_.size()) {
        (void)live.reclaim_free_pages(moves_.size() - space_.available_pages(), c.address, c.address + c.size, wait);
      }
    }
    if (space_.available_pages() < moves_.size()) {
      (void)commit_precopies(moves_.size() - space_.available_pages(), &live, nullptr, c.address, c.address + c.size);
    }
    // What fits comes back now; the rest the launch scan brings back, gated,
    // so a block larger than the room left beside the running launches still
    // costs its launch only the copy of what did not fit.
    if (space_.available_pages() == 0) continue;
    if (space_.available_pages() < moves_.size()) moves_.resize(space_.available_pages());
    CUevent done = nullptr;
    const std::size_t moved = transit_->tracked_to_device(space_, moves_, &done);
    if (done != nullptr && moved > 0) inflight_.push_back({c.buffer_id, done});
    if (moved > 0) {
      std::lock_guard<std::mutex> guard(stats_lock_);
      counters_.prefetches++;
      counters_.learned_prefetches++;
      counters_.prefetched_bytes += moved * space_.page_size();
    }
  }
}

void Residency::precopy_for_demand(pool::LiveBlocks& live) {
  // The demand of twice the prefetch window: a precopy must have finished
  // when its demand comes, and a commit takes a whole block at once, so the
  // copies run well ahead of the demand they cover.
  const std::size_t wanted = schedule_->predicted_demand(4 * options_.learn_ahead);
  if (wanted <= precopied_pages_) return;
  live.candidates(&live_scratch_);
  // Needed last first (Belady's choice, made ahead). Not copied out: a
  // block the next launch uses, or one the schedule cannot place (it may be
  // about to be used). A block the next learn_ahead launches use is copied
  // out only against the demand of those launches: the eviction that meets
  // that demand takes it anyway (a block as large as the room left has no
  // other to take), and copied ahead it leaves without a gate; beyond that
  // demand it is being brought back, and the copy would be wasted. A copy
  // made stale by a use before its commit costs only the copy.
  const std::uint64_t horizon = schedule_->launches();
  ranked_.clear();
  for (std::size_t i = 0; i < live_scratch_.size(); ++i) {
    const std::uint64_t next = schedule_->next_use(live_scratch_[i].buffer_id);
    if (next == LaunchSchedule::kUnknown || next <= horizon || in_current_launch(live_scratch_[i].buffer_id)) continue;
    const std::uint64_t id = live_scratch_[i].buffer_id;
    // Copied already, or being brought back.
    const bool copied =
        std::any_of(precopies_.begin(), precopies_.end(), [&](const Precopy& p) { return p.buffer_id == id; });
    if (!copied && !arriving(id)) ranked_.emplace_back(next, i);
  }
  std::sort(ranked_.begin(), ranked_.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  const std::uint64_t near = schedule_->launches() + options_.learn_ahead;
  const std::size_t wanted_near = schedule_->predicted_demand(options_.learn_ahead);
  for (const auto& [next, index] : ranked_) {
    // Ranked furthest first, so once a block's cover is met, every later
    // block's (the same, or the near demand's) is too.
    const std::size_t cover = next > near ? wanted : std::min(wanted, wanted_near);
    if (precopied_pages_ >= cover) break;
    const pool::EvictionCandidate& c = live_scratch_[index];
    Precopy copy{c.address, c.buffer_id, c.last_use, {}, nullptr, nullptr};
    const auto [first, end] = c.reservation->whole_pages(c.address, c.size);
    bool cache_full = false;
    for (std::size_t p = first; p < end && precopied_pages_ + copy.moves.size() < cover; ++p) {
      if (c.reservation->page(p).residency != space::Residency::device) continue;
      space::HostPage* host = cache_->take();
      if (host == nullptr) {
        cache_full = true;
        break;
      }
      copy.moves.push_back({c.reservation, p, host, false});
    }
    // A block already on the host has nothing to copy out: the next one may.
    if (copy.moves.empty() && !cache_full) continue;
    if (copy.moves.empty()) break;
    if (!transit_->precopy_to_host(copy.moves, &copy.start, &copy.done)) {
      for (const PageMove& m : copy.moves) cache_->give(m.host);
      break;
    }
    precopied_pages_ += copy.moves.size();
    precopies_.push_back(std::move(copy));
    std::lock_guard<std::mutex> guard(stats_lock_);
    counters_.precopies++;
  }
}

std::size_t Residency::commit_precopies(std::size_t pages, pool::LiveBlocks* live,
                                        const std::vector<pool::EvictionCandidate>* candidates,
                                        std::uintptr_t keep_begin, std::uintptr_t keep_end) {
  std::size_t moved = 0;
  for (std::size_t i = 0; i < precopies_.size() && moved < pages;) {
    Precopy& copy = precopies_[i];
    pool::EvictionCandidate c;
    bool valid = false;
    if (live != nullptr) {
      valid = live->find(copy.address, &c);
    } else {
      auto it = std::find_if(candidates->begin(), candidates->end(),
                             [&](const pool::EvictionCandidate& e) { return e.address == copy.address; });
      valid = it != candidates->end();
      if (valid) c = *it;
    }
    valid = valid && c.buffer_id == copy.buffer_id && c.last_use == copy.last_use;
    for (const PageMove& m : copy.moves) {
      valid = valid && m.reservation->page(m.page).residency == space::Residency::device;
    }
    if (!valid) {
      discard_precopy(i);
      continue;
    }
    const std::uintptr_t begin = c.address;
    // Room for a bring-back (`live` set) is not taken from a block the
    // prefetch window is about to bring back itself.
    const bool soon =
        live != nullptr && schedule_->next_use(copy.buffer_id) <= schedule_->launches() + options_.learn_ahead;
    if (soon || (begin < keep_end && begin + c.size > keep_begin)) {
      ++i;
      continue;
    }
    precopied_pages_ -= copy.moves.size();
    const std::size_t done = transit_->commit_to_host(space_, copy.moves, copy.start, copy.done);
    for (const PageMove& m : copy.moves) {
      if (!m.moved && m.host->current.reservation == nullptr) cache_->give(m.host);
    }
    moved += done;
    {
      std::lock_guard<std::mutex> guard(stats_lock_);
      counters_.precopies_used++;
      if (done > 0) {
        counters_.evictions++;
        counters_.evicted_bytes += done * space_.page_size();
      }
    }
    precopies_.erase(precopies_.begin() + static_cast<std::ptrdiff_t>(i));
  }
  return moved;
}

void Residency::discard_precopy(std::size_t index) {
  Precopy& copy = precopies_[index];
  precopied_pages_ -= copy.moves.size();
  std::vector<space::HostPage*> pages;
  pages.reserve(copy.moves.size());
  for (const PageMove& m : copy.moves) pages.push_back(m.host);
  transit_->release_after(copy.start, copy.done, std::move(pages));
  precopies_.erase(precopies_.begin() + static_cast<std::ptrdiff_t>(index));
}

void Residency::order_by_next_use(const std::vector<pool::EvictionCandidate>& candidates) {
  // Known next uses, furthest first, then blocks the schedule cannot place,
  // least recently used first.
  const std::uint64_t unknown = LaunchSchedule::kUnknown;
  std::vector<std::uint64_t>& next = next_use_scratch_;  // by the candidate's index
  next.assign(candidates.size(), unknown);
  for (const RankedBlock& c : ordered_) next[c.source] = schedule_->next_use(candidates[c.source].buffer_id);
  std::stable_sort(ordered_.begin(), ordered_.end(), [&](const RankedBlock& a, const RankedBlock& b) {
    const bool known_a = next[a.source] != unknown;
    const bool known_b = next[b.source] != unknown;
    if (known_a != known_b) return known_a;
    if (known_a) return next[a.source] > next[b.source];
    return a.last_use < b.last_use;
  });
}

void Residency::before_use(std::uint64_t buffer_id, std::uintptr_t stream) {
  // A block brought back a part at a time has a copy in flight for each part.
  for (auto it = inflight_.begin(); it != inflight_.end();) {
    if (it->buffer_id != buffer_id) {
      ++it;
    } else if (transit_->finished(it->done)) {
      it = inflight_.erase(it);
    } else {
      transit_->wait_on(it->done, stream);
      ++it;
    }
  }
  // A block used again makes its precopy stale. The launch still waits for
  // the copy: a kernel must not write the pages it is reading.
  for (std::size_t i = 0; i < precopies_.size(); ++i) {
    if (precopies_[i].buffer_id != buffer_id) continue;
    if (!transit_->finished(precopies_[i].done)) transit_->wait_on(precopies_[i].done, stream);
    discard_precopy(i);
    break;
  }
}

void Residency::forget(std::uint64_t buffer_id) {
  if (schedule_ == nullptr) return;
  schedule_->forget(buffer_id);
  for (auto it = inflight_.begin(); it != inflight_.end();) {
    if (it->buffer_id != buffer_id) {
      ++it;
      continue;
    }
    // The copy still writes the block's pages: a new owner's first writes
    // must not be overwritten.
    transit_->wait_for(it->done);
    it = inflight_.erase(it);
  }
  // The freed pages may go to a new owner at once: its first writes must
  // not race a precopy still reading them.
  for (std::size_t i = 0; i < precopies_.size(); ++i) {
    if (precopies_[i].buffer_id == buffer_id) {
      transit_->wait_for(precopies_[i].done);
      discard_precopy(i);
      break;
    }
  }
}

ResidencyStats Residency::stats() const {
  ResidencyStats s;
  {
    std::lock_guard<std::mutex> guard(stats_lock_);
    s = counters_;
  }
  complete_stats(cache_->stats(), &s);
  return s;
}

bool Residency::try_stats(std::chrono::steady_clock::time_point deadline, ResidencyStats* out) const {
  ResidencyStats s;
  {
    std::unique_lock<std::mutex> guard(stats_lock_, std::defer_lock);
    if (!util::try_lock_until(guard, deadline)) return false;
    s = counters_;
  }
  HostCacheStats cache;
  if (!cache_->try_stats(deadline, &cache)) return false;
  complete_stats(cache, &s);
  *out = s;
  return true;
}

void Residency::complete_stats(const HostCacheStats& cache, ResidencyStats* s) const {
  s->launch_prefetches = launch_prefetches_.load(std::memory_order_relaxed);
  s->host_resident_launches = host_resident_launches_.load(std::memory_order_relaxed);
  s->host_cache_bytes = cache.held_bytes;
  s->host_cache_peak_bytes = cache.peak_held_bytes;
  s->host_cache_limit_bytes = cache_->limit_bytes();
  s->peak_evicted_bytes = cache.peak_in_use_bytes;
  s->pin_calls = cache.pin_calls;
  s->sync_pins = cache.sync_pins;
  s->host_resident_bytes = cache.in_use_bytes;
}

}  // namespace tidepool::residency
