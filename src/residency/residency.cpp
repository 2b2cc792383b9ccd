// Residency: which pages move, to which host pages, and the counters. See
// residency.hpp; the moves themselves are transit.cpp's.
#include "residency/residency.hpp"

#include <algorithm>

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
  std::unique_ptr<Residency> residency(
      new Residency(space, std::move(cache).value(), std::move(transit).value(), std::move(policy), options));
  if (options.compress != CompressMode::off) {
    auto compressor =
        Compressor::create(driver, context, space.capabilities().device, *residency->cache_, options.compress);
    if (compressor) {
      residency->compressor_ = std::move(compressor).value();
      residency->transit_->set_compressor(residency->compressor_.get());
    } else {
      residency->compress_off_reason_ = compressor.status().message();
    }
  }
  return residency;
}

Residency::Residency(space::AddressSpace& space, std::unique_ptr<HostCache> cache, std::unique_ptr<Transit> transit,
                     std::unique_ptr<EvictionPolicy> policy, const ResidencyOptions& options)
    : space_(space),
      cache_(std::move(cache)),
      transit_(std::move(transit)),
      policy_(std::move(policy)),
      options_(options) {
  if (options_.learn) learned_ = std::make_unique<LearnedPrefetch>(space_, *cache_, *transit_, options_.learn_ahead);
}

Residency::~Residency() {
  drain();
  return_pages(transit_->reap(true));
  transit_->set_compressor(nullptr);
}

void Residency::drain() {
  // Copies into pool pages still in flight finish before anything unmaps them.
  if (learned_ != nullptr) learned_->drain();
  reap_transit(true);
}

void Residency::reap_transit(bool wait) {
  if (learned_ != nullptr) learned_->forget_finished(wait);
  return_pages(transit_->reap(wait));
}

void Residency::release(space::HostPage* page) {
  if (compressor_ != nullptr) {
    compressor_->release(page);
  } else {
    cache_->give(page);
  }
}

void Residency::return_pages(std::vector<space::HostPage*> pages) {
  for (space::HostPage* page : pages) release(page);
}

void Residency::make_page_readable(space::Reservation& reservation, std::size_t p) {
  const space::HostPage* host = reservation.page(p).host;
  if (reservation.page(p).residency != space::Residency::host || host == nullptr || !host->compressed) return;
  if (compressor_->expand(space_, reservation, p, transit_->to_device_stream())) return;
  // No raw page could be made (a failed pin): back to the device, where the
  // budget has room.
  if (space_.available_pages() == 0) return;
  std::vector<PageMove> one{{&reservation, p, reservation.page(p).host, false}};
  (void)transit_->to_device(space_, one);
  transit_->wait_for_copies_in();
}

void Residency::make_readable(space::Reservation& reservation, std::uintptr_t address, std::size_t length) {
  if (!has_unreadable_pages() || length == 0) return;
  const std::size_t last = reservation.page_of(address + length - 1);
  for (std::size_t p = reservation.page_of(address); p <= last; ++p) make_page_readable(reservation, p);
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
  if (learned_ != nullptr) {
    committed = learned_->commit_for_eviction(pages, candidates, keep_begin, keep_end);
    if (committed >= pages) {
      // What an eviction made spare, not what it asked for: precopies are
      // committed a whole block at a time, and the next step's precopies
      // must cover what this step's evictions really moved.
      learned_->note_demand(committed);
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
    if (on_device > 0) ordered_.push_back({c.address, c.size, c.last_use, on_device, i, c.buffer_id});
  }
  const EvictionPolicy* learned_order = learned_ != nullptr ? learned_->victim_order() : nullptr;
  (learned_order != nullptr ? *learned_order : *policy_).order(ordered_);

  // A batch of at least min_evict_pages, but never more than a sixteenth of
  // the budget beyond what was asked: a small budget evicts only what it needs.
  const std::size_t budget_pages = space_.pool_limit() / page_size;
  const std::size_t target = std::max(pages, std::min(options_.min_evict_pages, budget_pages / 16));
  moves_.clear();
  bool cache_full = false;
  fills_.clear();  // tracked bring-backs that may still be writing a chosen block's pages
  for (const RankedBlock& c : ordered_) {
    space::Reservation& r = *candidates[c.source].reservation;
    const auto [first, end] = r.whole_pages(c.address, c.size);
    if (learned_ != nullptr) learned_->fills_of(c.buffer_id, &fills_);
    for (std::size_t p = first; p < end && moves_.size() < target; ++p) {
      if (r.page(p).residency != space::Residency::device || kept(r.page_address(p))) continue;
      if (compressing()) {
        moves_.push_back({&r, p, nullptr, false});  // the compressor chooses the page
        continue;
      }
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
    if (m.moved) continue;
    if (m.host == nullptr) {
      cache_full = true;  // the compressor found no room for it
    } else if (m.host->current.reservation == nullptr) {
      release(m.host);
    }
  }
  if (learned_ != nullptr) learned_->note_demand(moved + committed);
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
  counters_.failed_moves = t.failed_moves;
  counters_.move_wait_ms = t.wait_ms;
  counters_.remap_ms = t.remap_ms;
  // Bytes per millisecond / 1e6 is GB/s.
  counters_.to_host_gbps = t.to_host_ms > 0 ? static_cast<double>(t.timed_to_host_bytes) / t.to_host_ms / 1e6 : 0;
  counters_.to_device_gbps =
      t.to_device_ms > 0 ? static_cast<double>(t.timed_to_device_bytes) / t.to_device_ms / 1e6 : 0;
}

void Residency::launched(std::uintptr_t kernel, const pool::LaunchedBlock* blocks, std::size_t count, bool all_blocks,
                         pool::LiveBlocks& live) {
  if (learned_ == nullptr || !learned_->record(kernel, blocks, count, all_blocks)) return;
  collect_released_host_pages();
  learned_->move_ahead(live);
  std::lock_guard<std::mutex> guard(stats_lock_);
  note_transit_stats();
}

void Residency::before_use(std::uint64_t buffer_id, std::uintptr_t stream) {
  if (learned_ != nullptr) learned_->before_use(buffer_id, stream);
}

bool Residency::unread_launch() {
  const bool learn_first = learned_ != nullptr && learned_->trust_lost();
  if (compressor_ == nullptr) return learn_first;
  const bool was_on = compressor_->on();
  compressor_->turn_off();
  for (const space::PageLocation& at : compressor_->compressed_locations())
    make_page_readable(*at.reservation, at.page);
  return learn_first || was_on;
}

void Residency::forget(std::uint64_t buffer_id) {
  if (learned_ != nullptr) learned_->forget(buffer_id);
}

ResidencyStats Residency::stats() const {
  ResidencyStats s;
  {
    std::lock_guard<std::mutex> guard(stats_lock_);
    s = counters_;
  }
  if (compressor_ != nullptr) s.compression = compressor_->stats();
  complete_stats(learned_ != nullptr ? learned_->stats() : LearnedStats{}, cache_->stats(), &s);
  return s;
}

bool Residency::try_stats(std::chrono::steady_clock::time_point deadline, ResidencyStats* out) const {
  ResidencyStats s;
  {
    std::unique_lock<std::mutex> guard(stats_lock_, std::defer_lock);
    if (!util::try_lock_until(guard, deadline)) return false;
    s = counters_;
  }
  LearnedStats learned;
  if (learned_ != nullptr && !learned_->try_stats(deadline, &learned)) return false;
  HostCacheStats cache;
  if (!cache_->try_stats(deadline, &cache)) return false;
  if (compressor_ != nullptr && !compressor_->try_stats(deadline, &s.compression)) return false;
  complete_stats(learned, cache, &s);
  *out = s;
  return true;
}

void Residency::complete_stats(const LearnedStats& learned, const HostCacheStats& cache, ResidencyStats* s) const {
  s->prefetches += learned.prefetches;
  s->prefetched_bytes += learned.prefetched_bytes;
  s->learned_prefetches = learned.prefetches;
  s->precopies = learned.precopies;
  s->precopies_used = learned.precopies_used;
  s->evictions += learned.evictions;
  s->evicted_bytes += learned.evicted_bytes;
  s->learned_period = learned.period;
  s->learned_launches = learned.launches;
  s->learned_candidates = learned.candidates;
  s->launch_prefetches = launch_prefetches_.load(std::memory_order_relaxed);
  s->host_resident_launches = host_resident_launches_.load(std::memory_order_relaxed);
  s->host_cache_bytes = cache.held_bytes;
  s->host_cache_peak_bytes = cache.peak_held_bytes;
  s->host_cache_limit_bytes = cache_->limit_bytes();
  s->peak_evicted_bytes = cache.peak_in_use_bytes;
  s->pin_calls = cache.pin_calls;
  s->sync_pins = cache.sync_pins;
  s->sync_pin_ms = cache.sync_pin_ms;
  s->host_resident_bytes = cache.in_use_bytes;
  if (compressor_ != nullptr) s->compressing = compressor_->on();
}

}  // namespace tidepool::residency
