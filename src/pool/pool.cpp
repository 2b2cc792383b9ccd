// Pool: placement, split and coalesce, stream-ordered reuse, deferred frees
// and the out-of-memory ladder. See pool.hpp for the design.
//
// Fast path (allocate): round, policy->choose, carve, insert into the live
// map. It calls the driver only when the chosen range lies over unmapped
// pages or was last freed on another stream. Fast path (deallocate): live map
// lookup, coalesce, index insert.
#include "pool/pool.hpp"

#include <algorithm>
#include <limits>
#include <mutex>

namespace tidepool::pool {

namespace {

std::uintptr_t merge_streams(std::uintptr_t a, std::uintptr_t b) {
  if (a == kNoPendingWork) return b;
  if (b == kNoPendingWork || a == b) return a;
  return kSeveralStreams;
}

// The legacy default stream. Work recorded on it follows prior work on every
// blocking stream of the context.
const CUstream kLegacyStream = nullptr;

}  // namespace

util::Result<std::unique_ptr<Pool>> Pool::create(const driver::Driver& driver, space::AddressSpace& space,
                                                 CUcontext context, const PoolOptions& options) {
  auto policy = make_policy(options.policy);
  if (!policy) return util::Status(util::Error::bad_config, "unknown placement policy");
  return std::unique_ptr<Pool>(new Pool(driver, space, context, options, std::move(policy)));
}

Pool::Pool(const driver::Driver& driver, space::AddressSpace& space, CUcontext context, const PoolOptions& options,
           std::unique_ptr<PlacementPolicy> policy)
    : driver_(driver),
      api_(driver.api()),
      space_(space),
      context_(context),
      options_(options),
      policy_(std::move(policy)) {
  deferred_.reserve(options_.deferred_batch * 4);
}

Pool::~Pool() {
  std::lock_guard<util::SpinLock> guard(lock_);
  driver::ScopedContext scope(api_, context_);
  // Wait for work still using freed memory before the space unmaps it.
  for (DeferredFence& fence : deferred_fences_) {
    for (CUevent e : fence.events) {
      (void)api_.eventSynchronize(e);
      (void)api_.eventDestroy(e);
    }
  }
  for (StreamFence& f : stream_fences_) {
    if (f.event != nullptr) (void)api_.eventDestroy(f.event);
  }
  for (CUevent e : spare_events_) (void)api_.eventDestroy(e);
  if (unsynchronized_async_frees_ && api_.ctxSynchronize != nullptr) (void)api_.ctxSynchronize();
  for (auto& segment : segments_) (void)space_.unreserve(segment->reservation);
}

std::string_view Pool::policy_name() const { return policy_->name(); }

// --- allocation -----------------------------------------------------------------

util::Result<std::uintptr_t> Pool::allocate(std::size_t size, std::uintptr_t stream, bool ordered) {
  if (size == 0) return std::uintptr_t{0};
  if (size > (std::numeric_limits<std::size_t>::max() >> 2)) {
    std::lock_guard<util::SpinLock> guard(lock_);
    stats_.ooms++;
    return util::Status(util::Error::out_of_memory, "request larger than any device");
  }
  const int arena_id = size <= options_.small_size ? 0 : 1;
  std::size_t rounded = util::align_up(size, arena_id == 0 ? options_.small_alignment : options_.large_alignment);
  rounded = util::align_up(policy_->round(rounded), options_.small_alignment);

  std::lock_guard<util::SpinLock> guard(lock_);
  if (ordered) note_stream(stream);
  util::Status error;
  Block* block = allocate_locked(arena_id, rounded, stream, ordered, &error);
  if (block == nullptr) {
    stats_.ooms++;
    return error.ok() ? util::Status(util::Error::out_of_memory, "out of device memory") : error;
  }
  block->requested = size;
  live_.insert(block->address, block);
  stats_.allocations++;
  stats_.live_bytes += size;
  stats_.handed_out_bytes += block->size;
  stats_.peak_live_bytes = std::max(stats_.peak_live_bytes, stats_.live_bytes);
  return block->address;
}

Block* Pool::allocate_locked(int arena_id, std::size_t rounded, std::uintptr_t stream, bool ordered,
                             util::Status* error) {
  Arena& arena = arenas_[arena_id];

  // The common case: a cached block, backed, same stream.
  if (Block* b = try_place(arena, rounded, stream, ordered, error)) return b;

  // The ladder. Each rung either makes the retry succeed or moves to the next.
  driver::ScopedContext scope(api_, context_);
  for (int rung = 0; rung < 6; ++rung) {
    const bool no_fit = error->error() == util::Error::invalid_value;  // no free block large enough
    util::Status step;
    switch (rung) {
      case 0:  // frees whose fences already completed
        if (!promote_deferred(false)) continue;
        break;
      case 1:  // no block fits: more address space (or, without VMM, a new chunk)
        if (!no_fit) continue;
        step = add_segment(arena, arena_id, rounded);
        if (!step) {
          *error = step;
          continue;
        }
        break;
      case 2:  // wait for outstanding deferred frees
        if (!promote_deferred(true)) continue;
        break;
      case 3: {  // stitch: unmap idle pages elsewhere and back this range with them
        if (!space_.uses_vmm() || no_fit) continue;
        const std::size_t short_by = pages_short_;
        if (short_by == 0 || reclaim_idle_pages(short_by, keep_begin_, keep_end_) < short_by) continue;
        break;
      }
      case 4:  // without VMM: give back empty chunks and retry with a new one
        if (space_.uses_vmm()) continue;
        if (trim_chunks() == 0) continue;
        step = add_segment(arena, arena_id, rounded);
        if (!step) {
          *error = step;
          continue;
        }
        break;
      default: continue;
    }
    if (Block* b = try_place(arena, rounded, stream, ordered, error)) return b;
  }
  if (error->ok() || error->error() == util::Error::invalid_value) {
    *error = util::Status(util::Error::out_of_memory, "out of device memory");
  }
  return nullptr;
}

Block* Pool::try_place(Arena& arena, std::size_t rounded, std::uintptr_t stream, bool ordered, util::Status* error) {
  Request request{rounded, stream, &arena == &arenas_[0], sequence_++};
  Block* chosen = policy_->choose(arena.index, request);
  if (chosen == nullptr) {
    *error = util::Status(util::Error::invalid_value, "no free block fits");
    return nullptr;
  }
  const bool high = policy_->carve_end(*chosen, request) == CarveEnd::high;
  const std::uintptr_t begin = high ? chosen->address + chosen->size - rounded : chosen->address;
  space::Reservation& reservation = *chosen->segment->reservation;
  const std::size_t missing = space_.unbacked_pages(reservation, begin, rounded);
  if (missing > 0) {
    // Stitch before growing: idle cached pages elsewhere back this range
    // before any new physical memory is created, so what the pool holds
    // tracks what is live rather than the history of its layout.
    if (options_.stitch_before_grow && space_.uses_vmm() && missing > space_.spare_pages()) {
      driver::ScopedContext scope(api_, context_);
      reclaim_idle_pages(missing - space_.spare_pages(), begin, begin + rounded);
    }
    const std::size_t available = space_.available_pages();
    if (missing > available) {
      pages_short_ = missing - available;
      keep_begin_ = begin;
      keep_end_ = begin + rounded;
      *error = util::Status(util::Error::out_of_memory, "device budget exhausted");
      return nullptr;
    }
    driver::ScopedContext scope(api_, context_);
    if (util::Status s = space_.back(reservation, begin, rounded); !s) {
      *error = s;
      pages_short_ = 0;
      return nullptr;
    }
  }
  Block* block = carve(arena, chosen, rounded, request);
  if (util::Status s = make_stream_safe(block, stream, ordered); !s) {
    // The block cannot be made safe (the driver failed): give it back.
    release_to_index(arena, block);
    *error = s;
    return nullptr;
  }
  *error = util::Status::success();
  return block;
}

Block* Pool::carve(Arena& arena, Block* chosen, std::size_t rounded, const Request& request) {
  arena.index.erase(chosen);
  Block* result = chosen;
  if (chosen->size > rounded) {
    Block* piece = blocks_.make();
    piece->segment = chosen->segment;
    piece->stream = chosen->stream;
    piece->free_epoch = chosen->free_epoch;
    piece->size = rounded;
    if (policy_->carve_end(*chosen, request) == CarveEnd::high) {
      piece->address = chosen->address + chosen->size - rounded;
      piece->prev = chosen;
      piece->next = chosen->next;
      if (chosen->next != nullptr) chosen->next->prev = piece;
      chosen->next = piece;
    } else {
      piece->address = chosen->address;
      chosen->address += rounded;
      piece->prev = chosen->prev;
      piece->next = chosen;
      if (chosen->prev != nullptr) {
        chosen->prev->next = piece;
      } else {
        chosen->segment->first = piece;
      }
      chosen->prev = piece;
    }
    chosen->size -= rounded;
    arena.index.insert(chosen);
    result = piece;
  }
  result->is_free = false;
  policy_->on_carved(*result);
  return result;
}

// --- streams ----------------------------------------------------------------------

void Pool::note_stream(std::uintptr_t stream) {
  if (!known_streams_.empty() && known_streams_.back() == stream) return;
  auto it = std::find(known_streams_.begin(), known_streams_.end(), stream);
  if (it != known_streams_.end()) {
    std::iter_swap(it, known_streams_.end() - 1);  // keep the most recent last
    return;
  }
  // Streams seen long ago may be destroyed; keep the most recent few.
  constexpr std::size_t kMaxKnownStreams = 64;
  if (known_streams_.size() == kMaxKnownStreams) known_streams_.erase(known_streams_.begin());
  known_streams_.push_back(stream);
}

void Pool::forget_stream(std::uintptr_t stream) {
  known_streams_.erase(std::remove(known_streams_.begin(), known_streams_.end(), stream), known_streams_.end());
  for (auto it = stream_fences_.begin(); it != stream_fences_.end(); ++it) {
    if (it->stream != stream) continue;
    if (it->event != nullptr) return_event(it->event);
    stream_fences_.erase(it);
    return;
  }
}

Pool::StreamFence& Pool::fence_for(std::uintptr_t stream) {
  for (StreamFence& f : stream_fences_) {
    if (f.stream == stream) return f;
  }
  stream_fences_.push_back(StreamFence{stream, nullptr, 0});
  return stream_fences_.back();
}

util::Status Pool::make_stream_safe(Block* block, std::uintptr_t stream, bool ordered) {
  const std::uintptr_t last = block->stream;
  if (last == kNoPendingWork) return util::Status::success();
  if (ordered && last == stream) return util::Status::success();

  driver::ScopedContext scope(api_, context_);
  std::uintptr_t gone = 0;  // a stream found destroyed; the context was synchronised instead
  auto guard_against = [&](std::uintptr_t other) -> util::Status {
    StreamFence& fence = fence_for(other);
    if (fence.event == nullptr) {
      fence.event = take_event();
      if (fence.event == nullptr) return {util::Error::driver_error, "cuEventCreate failed"};
      fence.epoch = 0;
    }
    if (fence.epoch < block->free_epoch) {
      // The last fence predates this free: record one now. It covers the free
      // and perhaps later work too, which is safe, only conservative.
      if (api_.eventRecord(fence.event, reinterpret_cast<CUstream>(other)) != CUDA_SUCCESS) {
        // The stream was destroyed since the free. Its queued work still
        // runs to the end, and only a wait for the whole context covers it.
        if (auto s = driver::check(api_.ctxSynchronize(), "cuCtxSynchronize"); !s) return s;
        gone = other;
        return util::Status::success();
      }
      fence.epoch = epoch_;
    }
    if (api_.eventQuery(fence.event) == CUDA_SUCCESS) return util::Status::success();
    stats_.cross_stream_waits++;
    if (ordered) {
      return driver::check(api_.streamWaitEvent(reinterpret_cast<CUstream>(stream), fence.event, 0),
                           "cuStreamWaitEvent");
    }
    return driver::check(api_.eventSynchronize(fence.event), "cuEventSynchronize");
  };

  if (last == kSeveralStreams) {
    for (std::uintptr_t other : known_streams_) {
      if (ordered && other == stream) continue;
      if (auto s = guard_against(other); !s) return s;
      if (gone != 0) break;  // the context is idle: every stream is covered
    }
  } else if (auto s = guard_against(last); !s) {
    return s;
  }
  if (gone != 0) forget_stream(gone);
  block->stream = kNoPendingWork;
  return util::Status::success();
}

CUevent Pool::take_event() {
  if (!spare_events_.empty()) {
    CUevent e = spare_events_.back();
    spare_events_.pop_back();
    return e;
  }
  CUevent e = nullptr;
  if (api_.eventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return nullptr;
  return e;
}

void Pool::return_event(CUevent event) {
  if (event != nullptr) spare_events_.push_back(event);
}

// --- deallocation -----------------------------------------------------------------

util::Status Pool::deallocate(std::uintptr_t address, std::uintptr_t stream, bool ordered) {
  if (address == 0) return util::Status::success();
  std::lock_guard<util::SpinLock> guard(lock_);
  Block* block = live_.erase(address);
  if (block == nullptr) {
    return {util::Error::invalid_value, "pointer is not a live tidepool allocation (double free or foreign)"};
  }
  stats_.frees++;
  stats_.live_bytes -= block->requested;
  stats_.handed_out_bytes -= block->size;
  block->requested = 0;
  if (ordered) {
    note_stream(stream);
    block->stream = stream;
    block->free_epoch = ++epoch_;
    unsynchronized_async_frees_ = true;
    release_to_index(arena_of(block), block);
    return util::Status::success();
  }
  deferred_.push_back(block);
  stats_.deferred_bytes += block->size;
  if (deferred_.size() - deferred_fenced_ >= options_.deferred_batch) {
    driver::ScopedContext scope(api_, context_);
    close_deferred_batch();
  }
  return util::Status::success();
}

void Pool::release_to_index(Arena& arena, Block* block) {
  block->is_free = true;
  if (Block* prev = block->prev; prev != nullptr && prev->is_free && prev->in_index) {
    arena.index.erase(prev);
    prev->size += block->size;
    prev->next = block->next;
    if (block->next != nullptr) block->next->prev = prev;
    prev->stream = merge_streams(prev->stream, block->stream);
    prev->free_epoch = std::max(prev->free_epoch, block->free_epoch);
    blocks_.recycle(block);
    block = prev;
  }
  if (Block* next = block->next; next != nullptr && next->is_free && next->in_index) {
    arena.index.erase(next);
    block->size += next->size;
    block->next = next->next;
    if (next->next != nullptr) next->next->prev = block;
    block->stream = merge_streams(block->stream, next->stream);
    block->free_epoch = std::max(block->free_epoch, next->free_epoch);
    blocks_.recycle(next);
  }
  arena.index.insert(block);
}

void Pool::close_deferred_batch() {
  if (deferred_.size() == deferred_fenced_) return;
  DeferredFence fence;
  fence.pending_end = deferred_.size();
  auto record = [&](CUstream s) {
    CUevent e = take_event();
    if (e == nullptr) return;
    if (api_.eventRecord(e, s) == CUDA_SUCCESS) {
      fence.events.push_back(e);
    } else {
      return_event(e);
    }
  };
  record(kLegacyStream);
  for (std::uintptr_t s : known_streams_) {
    if (s != 0) record(reinterpret_cast<CUstream>(s));
  }
  deferred_fences_.push_back(std::move(fence));
  deferred_fenced_ = deferred_.size();
}

bool Pool::promote_deferred(bool wait) {
  if (deferred_.empty()) return false;
  close_deferred_batch();
  std::size_t promoted_end = 0;
  std::size_t fences_done = 0;
  for (DeferredFence& fence : deferred_fences_) {
    bool complete = true;
    for (CUevent e : fence.events) {
      const CUresult r = wait ? api_.eventSynchronize(e) : api_.eventQuery(e);
      // An error other than "not ready" leaves nothing to wait for.
      if (r == CUDA_ERROR_NOT_READY) {
        complete = false;
        break;
      }
    }
    if (!complete) break;
    promoted_end = fence.pending_end;
    ++fences_done;
  }
  if (fences_done == 0) return false;
  for (std::size_t i = 0; i < fences_done; ++i) {
    for (CUevent e : deferred_fences_[i].events) return_event(e);
  }
  deferred_fences_.erase(deferred_fences_.begin(), deferred_fences_.begin() + static_cast<std::ptrdiff_t>(fences_done));
  for (std::size_t i = 0; i < promoted_end; ++i) {
    Block* b = deferred_[i];
    stats_.deferred_bytes -= b->size;
    b->stream = kNoPendingWork;
    release_to_index(arena_of(b), b);
  }
  deferred_.erase(deferred_.begin(), deferred_.begin() + static_cast<std::ptrdiff_t>(promoted_end));
  for (DeferredFence& fence : deferred_fences_) fence.pending_end -= promoted_end;
  deferred_fenced_ -= promoted_end;
  return promoted_end > 0;
}

// --- segments and pages -----------------------------------------------------------

util::Status Pool::add_segment(Arena& arena, int arena_id, std::size_t min_bytes) {
  const std::size_t page = space_.page_size();
  std::size_t bytes = 0;
  if (space_.uses_vmm()) {
    // VA is cheap: reserve enough that one segment normally serves the run.
    const std::size_t whole = options_.segment_bytes != 0 ? options_.segment_bytes : 2 * space_.device_limit();
    bytes = std::max(util::align_up(whole, page), util::align_up(min_bytes, page));
  } else if (arena_id == 0) {
    bytes = util::align_up(std::max<std::size_t>(min_bytes, 2 * util::MiB), page);
  } else {
    bytes = min_bytes <= 10 * util::MiB ? 20 * util::MiB : util::align_up(min_bytes, page);
  }
  auto reservation = space_.reserve(bytes);
  if (!reservation) return reservation.status();
  auto segment = std::make_unique<Segment>();
  segment->reservation = reservation.value();
  segment->arena = arena_id;
  Block* block = blocks_.make();
  block->address = segment->reservation->base();
  block->size = segment->reservation->size();
  block->segment = segment.get();
  block->stream = kNoPendingWork;
  block->is_free = true;
  segment->first = block;
  arena.segments.push_back(segment.get());
  segments_.push_back(std::move(segment));
  arena.index.insert(block);
  return util::Status::success();
}

void Pool::synchronize_if_needed() {
  if (!unsynchronized_async_frees_) return;
  // Blocks freed in stream order may still be in use by queued work; pages
  // beneath them can be unmapped only once that work is done.
  if (api_.ctxSynchronize != nullptr) (void)api_.ctxSynchronize();
  unsynchronized_async_frees_ = false;
}

std::size_t Pool::reclaim_idle_pages(std::size_t pages_needed, std::uintptr_t keep_begin, std::uintptr_t keep_end) {
  synchronize_if_needed();
  std::size_t reclaimed = 0;
  for (Arena& arena : arenas_) {
    // Collect first: unbacking does not change the index, but keep it simple.
    std::vector<std::pair<space::Reservation*, std::size_t>> idle;
    arena.index.for_each_by_address([&](const Block* b) {
      if (reclaimed + idle.size() >= pages_needed) return;
      space::Reservation& r = *b->segment->reservation;
      if (r.is_chunk()) return;
      const std::size_t page = r.page_size();
      const std::uintptr_t first_page_start = util::align_up(b->address - r.base(), page) + r.base();
      const std::uintptr_t scan_end = std::min<std::uintptr_t>(b->address + b->size, r.page_address(r.mapped_limit()));
      for (std::uintptr_t p = first_page_start; p + page <= scan_end; p += page) {
        if (p < keep_end && p + page > keep_begin) continue;
        const std::size_t index = r.page_of(p);
        if (r.page(index).residency == space::Residency::unmapped) continue;
        idle.emplace_back(&r, index);
        if (reclaimed + idle.size() >= pages_needed) return;
      }
    });
    for (auto [reservation, index] : idle) {
      if (space_.unback(*reservation, index, 1)) ++reclaimed;
    }
    if (reclaimed >= pages_needed) break;
  }
  return reclaimed;
}

std::size_t Pool::trim_chunks() {
  std::size_t released = 0;
  for (int arena_id = 0; arena_id < 2; ++arena_id) {
    Arena& arena = arenas_[arena_id];
    for (auto it = arena.segments.begin(); it != arena.segments.end();) {
      Segment* segment = *it;
      Block* only = segment->first;
      if (!only->is_free || only->next != nullptr || !only->in_index) {
        ++it;
        continue;
      }
      arena.index.erase(only);
      blocks_.recycle(only);
      released += segment->reservation->size();
      (void)space_.unreserve(segment->reservation);
      it = arena.segments.erase(it);
      std::erase_if(segments_, [segment](const auto& owned) { return owned.get() == segment; });
    }
  }
  return released;
}

std::size_t Pool::trim() {
  std::lock_guard<util::SpinLock> guard(lock_);
  driver::ScopedContext scope(api_, context_);
  promote_deferred(true);
  const std::size_t before = space_.device_bytes();
  if (space_.uses_vmm()) {
    reclaim_idle_pages(std::numeric_limits<std::size_t>::max(), 0, 0);
  } else {
    synchronize_if_needed();
    trim_chunks();
  }
  space_.release_spares(std::numeric_limits<std::size_t>::max());
  stats_.trims++;
  return before - space_.device_bytes();
}

void Pool::set_device_limit(std::size_t bytes) {
  std::lock_guard<util::SpinLock> guard(lock_);
  space_.set_device_limit(bytes);
  if (space_.device_bytes() > space_.device_limit()) {
    driver::ScopedContext scope(api_, context_);
    space_.release_spares(space_.device_bytes() - space_.device_limit());
  }
}

// --- queries ----------------------------------------------------------------------

bool Pool::owns(std::uintptr_t address) const {
  std::lock_guard<util::SpinLock> guard(lock_);
  return live_.find(address) != nullptr;
}

std::size_t Pool::requested_size(std::uintptr_t address) const {
  std::lock_guard<util::SpinLock> guard(lock_);
  const Block* b = live_.find(address);
  return b != nullptr ? b->requested : 0;
}

bool Pool::in_segments(std::uintptr_t address) const {
  std::lock_guard<util::SpinLock> guard(lock_);
  for (const auto& segment : segments_) {
    if (segment->reservation->contains(address)) return true;
  }
  return false;
}

bool Pool::find_containing(std::uintptr_t address, std::uintptr_t* base, std::size_t* size) const {
  std::lock_guard<util::SpinLock> guard(lock_);
  for (const auto& segment : segments_) {
    if (!segment->reservation->contains(address)) continue;
    for (const Block* b = segment->first; b != nullptr; b = b->next) {
      if (address >= b->address && address < b->address + b->size) {
        if (b->requested == 0 || b->is_free) return false;
        *base = b->address;
        *size = b->requested;
        return true;
      }
    }
  }
  return false;
}

PoolStats Pool::stats(bool with_fragmentation) const {
  std::lock_guard<util::SpinLock> guard(lock_);
  PoolStats s = stats_;
  s.reserved_bytes = space_.device_bytes();
  s.peak_reserved_bytes = space_.peak_device_bytes();
  s.spare_bytes = space_.spare_bytes();
  s.maps = space_.counters().maps;
  s.unmaps = space_.counters().unmaps;
  s.live_blocks = live_.size();
  s.segments = segments_.size();
  s.free_bytes = s.reserved_bytes > s.handed_out_bytes ? s.reserved_bytes - s.handed_out_bytes : 0;
  s.free_blocks = arenas_[0].index.count() + arenas_[1].index.count();
  if (!with_fragmentation) return s;
  // The largest request servable without new physical memory: a free block's
  // mapped bytes plus whatever spare pages could back the rest of it.
  std::uint64_t largest = 0;
  for (const Arena& arena : arenas_) {
    arena.index.for_each_by_address([&](const Block* b) {
      const space::Reservation& r = *b->segment->reservation;
      std::uint64_t mapped = 0;
      if (r.is_chunk()) {
        mapped = b->size;
      } else {
        const std::size_t first = r.page_of(b->address);
        const std::size_t last = std::min(r.page_of(b->address + b->size - 1) + 1, r.mapped_limit());
        for (std::size_t p = first; p < last; ++p) {
          if (r.page(p).residency == space::Residency::unmapped) continue;
          const std::uintptr_t lo = std::max(r.page_address(p), b->address);
          const std::uintptr_t hi = std::min(r.page_address(p) + r.page_size(), b->address + b->size);
          mapped += hi - lo;
        }
      }
      largest = std::max<std::uint64_t>(largest, std::min<std::uint64_t>(b->size, mapped + s.spare_bytes));
    });
  }
  s.largest_free_block = largest;
  return s;
}

std::vector<BlockView> Pool::snapshot() const {
  std::lock_guard<util::SpinLock> guard(lock_);
  std::vector<BlockView> out;
  for (const auto& segment : segments_) {
    const space::Reservation& r = *segment->reservation;
    for (const Block* b = segment->first; b != nullptr; b = b->next) {
      out.push_back(BlockView{b->address, b->size, b->is_free ? 0 : b->requested, r.is_backed(b->address, b->size),
                              segment->arena});
    }
  }
  return out;
}

}  // namespace tidepool::pool
