// LearnedPrefetch: bring-backs ahead of the launches predicted to use a
// block, precopies ahead of the evictions predicted to need room. See
// learned_prefetch.hpp; the copies themselves are transit.cpp's.
#include "residency/learned_prefetch.hpp"

#include <algorithm>
#include <array>

#include "util/util.hpp"

namespace tidepool::residency {

LearnedPrefetch::LearnedPrefetch(space::AddressSpace& space, HostCache& cache, Transit& transit, std::size_t ahead)
    : space_(space), cache_(cache), transit_(transit), ahead_(ahead), furthest_next_use_(schedule_) {}

bool LearnedPrefetch::record(std::uintptr_t kernel, const pool::LaunchedBlock* blocks, std::size_t count,
                             bool all_blocks) {
  std::array<ScheduledBlock, LaunchSchedule::kMaxBlocksPerLaunch> scheduled;
  const std::size_t n = std::min(count, scheduled.size());
  for (std::size_t i = 0; i < n; ++i) scheduled[i] = ScheduledBlock{blocks[i].buffer_id, blocks[i].address};
  schedule_.record(kernel, scheduled.data(), n);
  {
    std::lock_guard<std::mutex> guard(stats_lock_);
    counters_.period = schedule_.period();
    counters_.launches = schedule_.launches();
    counters_.candidates = schedule_.candidates();
  }
  if (blind_ || schedule_.period() == 0 || !all_blocks) return false;
  current_.clear();
  for (std::size_t i = 0; i < count; ++i) current_.push_back(ScheduledBlock{blocks[i].buffer_id, blocks[i].address});
  return true;
}

void LearnedPrefetch::move_ahead(pool::LiveBlocks& live) {
  prefetch_upcoming(live);
  precopy_for_demand(live);
}

bool LearnedPrefetch::arriving(std::uint64_t id) const {
  return std::any_of(inflight_.begin(), inflight_.end(), [&](const Inflight& f) { return f.buffer_id == id; });
}

bool LearnedPrefetch::in_current_launch(std::uint64_t id) const {
  return std::any_of(current_.begin(), current_.end(), [&](const ScheduledBlock& b) { return b.id == id; });
}

void LearnedPrefetch::prefetch_upcoming(pool::LiveBlocks& live) {
  if (space_.host_pages() == 0) return;
  schedule_.upcoming(ahead_, &upcoming_);
  for (const ScheduledBlock& b : upcoming_) {
    pool::EvictionCandidate c;
    // A block work may be reading on the host comes back only through a
    // gate, at the launch that names it.
    if (in_current_launch(b.id) || !live.find(b.address, &c) || c.buffer_id != b.id || c.read_on_host) continue;
    moves_.clear();
    // Pages wholly inside the block: an end page shared with a neighbour may
    // be touched by the neighbour's work, which never waits for this copy
    // (before_use), so it comes back gated, at the launch that names it.
    const auto [first, end] = c.reservation->whole_pages(c.address, c.size);
    for (std::size_t p = first; p < end; ++p) {
      if (c.reservation->page(p).residency == space::Residency::host) {
        moves_.push_back({c.reservation, p, c.reservation->page(p).host, false});
      }
    }
    if (moves_.empty()) continue;
    // Room, cheapest first: idle pages of free blocks; then pages of blocks
    // freed before the launch being scanned, the host waiting (under the
    // pool's lock) for the first record kept behind the device barrier that
    // put them back (right behind it, or made later when pages were parked
    // behind it: order::BarrierFences), not for the whole queue; then
    // precopied blocks, whose pages are already on the host.
    for (const bool wait : {false, true}) {
      if (space_.available_pages() < moves_.size()) {
        (void)live.reclaim_free_pages(moves_.size() - space_.available_pages(), c.address, c.address + c.size, wait);
      }
    }
    if (space_.available_pages() < moves_.size()) {
      (void)commit(moves_.size() - space_.available_pages(), &live, nullptr, c.address, c.address + c.size);
    }
    // What fits comes back now; the rest the launch scan brings back, gated,
    // so a block larger than the room left beside the running launches still
    // costs its launch only the copy of what did not fit.
    if (space_.available_pages() == 0) continue;
    if (space_.available_pages() < moves_.size()) moves_.resize(space_.available_pages());
    CUevent done = nullptr;
    const std::size_t moved = transit_.tracked_to_device(space_, moves_, &done);
    if (done != nullptr && moved > 0) inflight_.push_back({c.buffer_id, done});
    if (moved > 0) {
      std::lock_guard<std::mutex> guard(stats_lock_);
      counters_.prefetches++;
      counters_.prefetched_bytes += moved * space_.page_size();
    }
  }
}

void LearnedPrefetch::precopy_for_demand(pool::LiveBlocks& live) {
  // The demand of twice the prefetch window: a precopy must have finished
  // when its demand comes, and a commit takes a whole block at once, so the
  // copies run well ahead of the demand they cover.
  const std::size_t wanted = schedule_.predicted_demand(4 * ahead_);
  if (wanted <= precopied_pages_) return;
  live.candidates(&live_scratch_);
  // Needed last first (Belady's choice, made ahead). Not copied out: a
  // block the next launch uses, or one the schedule cannot place (it may be
  // about to be used). A block the next `ahead_` launches use is copied
  // out only against the demand of those launches: the eviction that meets
  // that demand takes it anyway (a block as large as the room left has no
  // other to take), and copied ahead it leaves without a gate; beyond that
  // demand it is being brought back, and the copy would be wasted. A copy
  // made stale by a use before its commit costs only the copy.
  const std::uint64_t horizon = schedule_.launches();
  ranked_.clear();
  for (std::size_t i = 0; i < live_scratch_.size(); ++i) {
    const std::uint64_t next = schedule_.next_use(live_scratch_[i].buffer_id);
    if (next == LaunchSchedule::kUnknown || next <= horizon || in_current_launch(live_scratch_[i].buffer_id)) continue;
    const std::uint64_t id = live_scratch_[i].buffer_id;
    // Copied already, or being brought back.
    const bool copied =
        std::any_of(precopies_.begin(), precopies_.end(), [&](const Precopy& p) { return p.buffer_id == id; });
    if (!copied && !arriving(id)) ranked_.emplace_back(next, i);
  }
  std::sort(ranked_.begin(), ranked_.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  const std::uint64_t near = schedule_.launches() + ahead_;
  const std::size_t wanted_near = schedule_.predicted_demand(ahead_);
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
      space::HostPage* host = cache_.take();
      if (host == nullptr) {
        cache_full = true;
        break;
      }
      copy.moves.push_back({c.reservation, p, host, false});
    }
    // A block already on the host has nothing to copy out: the next one may.
    if (copy.moves.empty() && !cache_full) continue;
    if (copy.moves.empty()) break;
    if (!transit_.precopy_to_host(copy.moves, &copy.start, &copy.done)) {
      for (const PageMove& m : copy.moves) cache_.give(m.host);
      break;
    }
    precopied_pages_ += copy.moves.size();
    precopies_.push_back(std::move(copy));
    std::lock_guard<std::mutex> guard(stats_lock_);
    counters_.precopies++;
  }
}

std::size_t LearnedPrefetch::commit_for_eviction(std::size_t pages,
                                                 const std::vector<pool::EvictionCandidate>& candidates,
                                                 std::uintptr_t keep_begin, std::uintptr_t keep_end) {
  return commit(pages, nullptr, &candidates, keep_begin, keep_end);
}

std::size_t LearnedPrefetch::commit(std::size_t pages, pool::LiveBlocks* live,
                                    const std::vector<pool::EvictionCandidate>* candidates, std::uintptr_t keep_begin,
                                    std::uintptr_t keep_end) {
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
    const bool soon = live != nullptr && schedule_.next_use(copy.buffer_id) <= schedule_.launches() + ahead_;
    if (soon || (begin < keep_end && begin + c.size > keep_begin)) {
      ++i;
      continue;
    }
    precopied_pages_ -= copy.moves.size();
    const std::size_t done = transit_.commit_to_host(space_, copy.moves, copy.start, copy.done);
    for (const PageMove& m : copy.moves) {
      if (!m.moved && m.host->current.reservation == nullptr) cache_.give(m.host);
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

void LearnedPrefetch::discard_precopy(std::size_t index) {
  Precopy& copy = precopies_[index];
  precopied_pages_ -= copy.moves.size();
  std::vector<space::HostPage*> pages;
  pages.reserve(copy.moves.size());
  for (const PageMove& m : copy.moves) pages.push_back(m.host);
  transit_.release_after(copy.start, copy.done, std::move(pages));
  precopies_.erase(precopies_.begin() + static_cast<std::ptrdiff_t>(index));
}

void LearnedPrefetch::before_use(std::uint64_t buffer_id, std::uintptr_t stream) {
  // A block brought back a part at a time has a copy in flight for each part.
  for (auto it = inflight_.begin(); it != inflight_.end();) {
    if (it->buffer_id != buffer_id) {
      ++it;
    } else if (transit_.finished(it->done)) {
      it = inflight_.erase(it);
    } else {
      transit_.wait_on(it->done, stream);
      ++it;
    }
  }
  // A block used again makes its precopy stale. The launch still waits for
  // the copy: a kernel must not write the pages it is reading.
  for (std::size_t i = 0; i < precopies_.size(); ++i) {
    if (precopies_[i].buffer_id != buffer_id) continue;
    if (!transit_.finished(precopies_[i].done)) transit_.wait_on(precopies_[i].done, stream);
    discard_precopy(i);
    break;
  }
}

bool LearnedPrefetch::trust_lost() {
  // The host waits, once: a stream wait would order only the launch's own
  // stream (and could break a capture), and later unread launches, on any
  // stream, then find nothing in flight.
  for (const Inflight& f : inflight_) transit_.wait_for(f.done);
  for (const Precopy& p : precopies_) transit_.wait_for(p.done);
  drain();
  const bool first = !blind_;
  blind_ = true;
  return first;
}

void LearnedPrefetch::forget(std::uint64_t buffer_id) {
  schedule_.forget(buffer_id);
  for (auto it = inflight_.begin(); it != inflight_.end();) {
    if (it->buffer_id != buffer_id) {
      ++it;
      continue;
    }
    // The copy still writes the block's pages: a new owner's first writes
    // must not be overwritten.
    transit_.wait_for(it->done);
    it = inflight_.erase(it);
  }
  // The freed pages may go to a new owner at once: its first writes must
  // not race a precopy still reading them.
  for (std::size_t i = 0; i < precopies_.size(); ++i) {
    if (precopies_[i].buffer_id == buffer_id) {
      transit_.wait_for(precopies_[i].done);
      discard_precopy(i);
      break;
    }
  }
}

void LearnedPrefetch::fills_of(std::uint64_t buffer_id, std::vector<CUevent>* out) const {
  for (const Inflight& f : inflight_) {
    if (f.buffer_id == buffer_id) out->push_back(f.done);
  }
}

void LearnedPrefetch::forget_finished(bool all) {
  if (all) {
    inflight_.clear();
  } else {
    std::erase_if(inflight_, [&](const Inflight& f) { return transit_.finished(f.done); });
  }
}

void LearnedPrefetch::drain() {
  while (!precopies_.empty()) discard_precopy(precopies_.size() - 1);
}

LearnedStats LearnedPrefetch::stats() const {
  std::lock_guard<std::mutex> guard(stats_lock_);
  return counters_;
}

bool LearnedPrefetch::try_stats(std::chrono::steady_clock::time_point deadline, LearnedStats* out) const {
  std::unique_lock<std::mutex> guard(stats_lock_, std::defer_lock);
  if (!util::try_lock_until(guard, deadline)) return false;
  *out = counters_;
  return true;
}

}  // namespace tidepool::residency
