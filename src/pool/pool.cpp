// Pool: placement, split and coalesce, stream-ordered reuse, deferred frees
// and the out-of-memory ladder. See pool.hpp for the design.
//
// Fast path (allocate): round, policy->choose, carve, insert into the live
// map. It calls the driver only when the chosen range lies over unmapped
// pages or was last freed on another stream. Fast path (deallocate): live map
// lookup, coalesce, index insert.
#include "pool/pool.hpp"

#include <algorithm>
#include <atomic>
#include <limits>
#include <mutex>

namespace tidepool::pool {

namespace {

// Stream keys. Handles are keys, except that the legacy stream has one key (0)
// and CU_STREAM_PER_THREAD names a different stream in every thread: its key
// is the thread's own, an odd-looking value no real handle (a pointer) takes.
constexpr std::uintptr_t kPerThreadTag = 0x2;
constexpr std::uintptr_t kTagMask = 0xf;

std::atomic<std::uintptr_t> next_thread_key{1};

std::uintptr_t this_thread_key() {
  thread_local const std::uintptr_t key = (next_thread_key.fetch_add(1) << 4) | kPerThreadTag;
  return key;
}

bool is_per_thread_key(std::uintptr_t key) { return key != kPerThreadTag && (key & kTagMask) == kPerThreadTag; }

std::uintptr_t stream_key(std::uintptr_t stream) {
  if (stream == reinterpret_cast<std::uintptr_t>(CU_STREAM_LEGACY)) return 0;
  if (stream == reinterpret_cast<std::uintptr_t>(CU_STREAM_PER_THREAD)) return this_thread_key();
  return stream;
}

// The handle work of `key` can be fenced on from this thread. Another thread's
// per-thread stream cannot be named here; the legacy stream waits for all of
// its earlier work (it is a blocking stream), so a record there covers it.
CUstream fence_handle(std::uintptr_t key) {
  if (is_per_thread_key(key)) return key == this_thread_key() ? CU_STREAM_PER_THREAD : nullptr;
  return reinterpret_cast<CUstream>(key);
}

// Buffer ids: the top bit keeps them apart from the driver's own (small
// counters), the next 15 bits name the pool, the rest count its allocations.
std::atomic<std::uint64_t> next_pool_serial{0};

}  // namespace

util::Result<std::unique_ptr<Pool>> Pool::create(const driver::Driver& driver, space::AddressSpace& space,
                                                 CUcontext context, StreamRegistry& streams,
                                                 const PoolOptions& options) {
  auto policy = make_policy(options.policy);
  if (!policy) return util::Status(util::Error::bad_config, "unknown placement policy");
  return std::unique_ptr<Pool>(new Pool(driver, space, context, streams, options, std::move(policy)));
}

Pool::Pool(const driver::Driver& driver, space::AddressSpace& space, CUcontext context, StreamRegistry& streams,
           const PoolOptions& options, std::unique_ptr<PlacementPolicy> policy)
    : driver_(driver),
      api_(driver.api()),
      space_(space),
      context_(context),
      options_(options),
      policy_(std::move(policy)),
      registry_(streams),
      events_(driver.api()),
      deferred_(driver.api(), context, streams, events_) {
  const std::uint64_t serial = next_pool_serial.fetch_add(1) & 0x7fff;
  buffer_id_base_ = (std::uint64_t{1} << 63) | (serial << 48);
}

Pool::~Pool() {
  std::lock_guard<util::SpinLock> guard(lock_);
  driver::ScopedContext scope(api_, context_);
  // Wait for work still using freed memory before the space unmaps it.
  (void)deferred_.promote(true, [](Block*) {});
  for (auto& [key, state] : streams_) {
    if (state.event != nullptr) (void)api_.eventDestroy(state.event);
  }
  if (unsynchronized_async_frees_ && api_.ctxSynchronize != nullptr) (void)api_.ctxSynchronize();
  events_.clear();
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
  const std::uintptr_t key = ordered ? stream_key(stream) : kNoPendingWork;

  std::lock_guard<util::SpinLock> guard(lock_);
  if (ordered && !cached_stream(key)) {
    if (auto known = known_stream(key); !known) return known.status();
  }
  util::Status error;
  Block* block = allocate_locked(arena_id, rounded, key, ordered, &error);
  if (block == nullptr) {
    stats_.ooms++;
    return error.ok() ? util::Status(util::Error::out_of_memory, "out of device memory") : error;
  }
  block->requested = size;
  block->buffer_id = buffer_id_base_ | ++next_buffer_id_;
  live_.insert(block->address, block);
  stats_.allocations++;
  stats_.live_bytes += size;
  stats_.handed_out_bytes += block->size;
  stats_.peak_live_bytes = std::max(stats_.peak_live_bytes, stats_.live_bytes);
  return block->address;
}

Block* Pool::allocate_locked(int arena_id, std::size_t rounded, std::uintptr_t stream, bool ordered,
                             util::Status* error) {
  Block* block = climb_ladder(arena_id, rounded, stream, ordered, error);
  // Blocks whose pending work could not be fenced go back; a later request
  // may find them finished.
  for (Block* set_aside : unsafe_) release_to_index(arena_of(set_aside), set_aside);
  unsafe_.clear();
  return block;
}

Block* Pool::place(Arena& arena, std::size_t rounded, std::uintptr_t stream, bool ordered, util::Status* error) {
  constexpr std::size_t kMaxSetAside = 8;
  for (;;) {
    Block* block = try_place(arena, rounded, stream, ordered, error);
    if (block != nullptr || !fence_failed_ || unsafe_.size() >= kMaxSetAside) return block;
  }
}

Block* Pool::climb_ladder(int arena_id, std::size_t rounded, std::uintptr_t stream, bool ordered, util::Status* error) {
  Arena& arena = arenas_[arena_id];

  // The common case: a cached block, backed, same stream.
  if (Block* b = place(arena, rounded, stream, ordered, error)) return b;

  // The ladder. Each rung either makes the retry succeed or moves to the next.
  driver::ScopedContext scope(api_, context_);
  for (int rung = 0; rung < 6; ++rung) {
    const bool no_fit = no_fit_;  // no free block large enough
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
        if (short_by == 0 || reclaim_idle_pages(short_by, keep_begin_, keep_end_, true, kNoPendingWork) < short_by)
          continue;
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
    if (Block* b = place(arena, rounded, stream, ordered, error)) return b;
  }
  if (error->ok() || no_fit_) {
    *error = util::Status(util::Error::out_of_memory, "out of device memory");
  }
  return nullptr;
}

Block* Pool::try_place(Arena& arena, std::size_t rounded, std::uintptr_t stream, bool ordered, util::Status* error) {
  Request request{rounded, stream, &arena == &arenas_[0], sequence_++};
  no_fit_ = false;
  fence_failed_ = false;
  Block* chosen = policy_->choose(arena.index, request);
  if (chosen == nullptr) {
    no_fit_ = true;
    *error = util::Status(util::Error::out_of_memory, "no free block fits");
    return nullptr;
  }
  const bool high = policy_->carve_end(*chosen, request) == CarveEnd::high;
  const std::uintptr_t begin = high ? chosen->address + chosen->size - rounded : chosen->address;
  space::Reservation& reservation = *chosen->segment->reservation;
  const std::size_t missing = space_.unbacked_pages(reservation, begin, rounded);
  if (missing > 0 && !deferred_.empty() && !promoting_) {
    // Freed memory is reused before new memory is created: cudaFree frees
    // whose fences have finished go back first, and the request looks again.
    driver::ScopedContext scope(api_, context_);
    if (promote_deferred(false)) {
      promoting_ = true;
      Block* again = try_place(arena, rounded, stream, ordered, error);
      promoting_ = false;
      return again;
    }
  }
  if (missing > 0) {
    // Stitch before growing: idle cached pages elsewhere back this range
    // before any new physical memory is created, so what the pool holds
    // tracks what is live rather than the history of its layout.
    if (options_.stitch_before_grow && space_.uses_vmm() && missing > space_.spare_pages()) {
      driver::ScopedContext scope(api_, context_);
      // No context synchronisation here, where the budget still has room:
      // pages under stream-ordered frees are taken once their stream is past
      // them, waiting only for the requesting stream's own earlier work.
      reclaim_idle_pages(missing - space_.spare_pages(), begin, begin + rounded, false,
                         ordered ? stream : kNoPendingWork);
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
    // Not known to be safe: set it aside (out of the index, merged with
    // nothing) and let the request look elsewhere.
    block->is_free = true;
    unsafe_.push_back(block);
    fence_failed_ = true;
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

util::Result<Pool::StreamState*> Pool::known_stream(std::uintptr_t key) {
  StreamState* state = last_state_;
  if (key != last_key_) {
    auto it = streams_.find(key);
    if (it == streams_.end()) {
      // First sight of a handle: the driver says whether it names a stream,
      // and of which context.
      StreamState fresh;
      if (key != 0 && !is_per_thread_key(key) && api_.streamGetCtx != nullptr) {
        CUcontext owner = nullptr;
        CUgreenCtx green = nullptr;
        const CUresult r = api_.streamGetCtx(reinterpret_cast<CUstream>(key), &owner, &green);
        if (r == CUDA_ERROR_INVALID_HANDLE || r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_CONTEXT_IS_DESTROYED) {
          return util::Status(util::Error::invalid_handle, "not a live stream", r);
        }
        fresh.other_context = r == CUDA_SUCCESS && owner != nullptr && owner != context_;
        // A stream created behind the hooks' back: fences must cover it too.
        if (!fresh.other_context && !registry_.alive(reinterpret_cast<CUstream>(key))) {
          registry_.created(reinterpret_cast<CUstream>(key));
        }
      }
      it = streams_.emplace(key, fresh).first;
    }
    last_key_ = key;
    last_state_ = state = &it->second;
  }
  if (state->other_context) return util::Status(util::Error::other_device, "a stream of another device");
  return state;
}

bool Pool::settle(Block* block) {
  if (block->stream == kNoPendingWork) return true;
  if (block->free_epoch <= synchronized_epoch_) {
    block->stream = kNoPendingWork;
    return true;
  }
  auto it = streams_.find(block->stream);
  if (it == streams_.end() || block->free_epoch > it->second.finished_epoch) return false;
  block->stream = kNoPendingWork;
  return true;
}

bool Pool::synchronize_context() {
  if (api_.ctxSynchronize == nullptr || deferred_.capture_in_progress()) return false;
  if (api_.ctxSynchronize() != CUDA_SUCCESS) return false;
  synchronized_epoch_ = epoch_;
  unsynchronized_async_frees_ = false;
  return true;
}

bool Pool::settle_by_query(Block* block, std::uintptr_t may_wait_for) {
  if (settle(block)) return true;
  const std::uintptr_t key = block->stream;
  StreamState& state = streams_[key];
  // A record still in flight is left to finish: recording again would only
  // push the answer later. Its completion settles every free before it.
  const bool may_wait = key == may_wait_for;
  auto finished = [&] {
    const CUresult r = api_.eventQuery(state.event);
    if (r == CUDA_SUCCESS) return true;
    return r == CUDA_ERROR_NOT_READY && may_wait && api_.eventSynchronize(state.event) == CUDA_SUCCESS;
  };
  if (state.event != nullptr && state.recorded_epoch > state.finished_epoch) {
    if (!finished()) return false;  // not ready, or not known
    state.finished_epoch = state.recorded_epoch;
    if (settle(block)) return true;
  }
  const CUstream handle = fence_handle(key);
  if (driver::capturing(api_, handle)) return false;
  if (state.event == nullptr) state.event = events_.take();
  if (state.event == nullptr || api_.eventRecord(state.event, handle) != CUDA_SUCCESS) return false;
  state.recorded_epoch = epoch_;
  if (!finished()) return false;
  state.finished_epoch = state.recorded_epoch;
  return settle(block);
}

util::Status Pool::make_stream_safe(Block* block, std::uintptr_t stream, bool ordered) {
  const std::uintptr_t last = block->stream;
  if (last == kNoPendingWork) return util::Status::success();
  if (ordered && last == stream) return util::Status::success();
  if (settle(block)) return util::Status::success();

  driver::ScopedContext scope(api_, context_);
  auto fenced = [&]() -> util::Status {
    StreamState& state = streams_[last];
    const CUstream handle = fence_handle(last);
    if (state.event == nullptr || state.recorded_epoch < block->free_epoch) {
      // The last record predates this free: record now. It covers the free
      // and perhaps later work too, which is safe, only conservative.
      if (driver::capturing(api_, handle)) return {util::Error::driver_error, "the stream is capturing"};
      if (state.event == nullptr) state.event = events_.take();
      if (state.event == nullptr) return {util::Error::driver_error, "cuEventCreate failed"};
      if (auto s = driver::check(api_.eventRecord(state.event, handle), "cuEventRecord"); !s) return s;
      state.recorded_epoch = epoch_;
    }
    const CUresult query = api_.eventQuery(state.event);
    if (query == CUDA_SUCCESS) {
      state.finished_epoch = std::max(state.finished_epoch, state.recorded_epoch);
      return util::Status::success();
    }
    if (query != CUDA_ERROR_NOT_READY) return driver::check(query, "cuEventQuery");
    stats_.cross_stream_waits++;
    if (ordered) {
      return driver::check(api_.streamWaitEvent(fence_handle(stream), state.event, 0), "cuStreamWaitEvent");
    }
    if (auto s = driver::check(api_.eventSynchronize(state.event), "cuEventSynchronize"); !s) return s;
    state.finished_epoch = std::max(state.finished_epoch, state.recorded_epoch);
    return util::Status::success();
  };
  if (util::Status s = fenced(); !s) {
    // Not known to be finished: only a whole-context wait proves it.
    if (!synchronize_context()) return s;
  }
  block->stream = kNoPendingWork;
  return util::Status::success();
}

void Pool::stream_destroyed(std::uintptr_t stream, bool retired) {
  const std::uintptr_t key = stream_key(stream);
  if (key == 0 || is_per_thread_key(key)) return;
  std::lock_guard<util::SpinLock> guard(lock_);
  auto it = streams_.find(key);
  if (it == streams_.end()) return;  // never used here: nothing can be pending on it
  // Free blocks with work still pending on the stream join the cudaFree
  // frees: the registry's event on the dying stream is part of their fence.
  std::vector<Block*> pending;
  for (Arena& arena : arenas_) {
    arena.index.for_each_by_address([&](const Block* b) {
      if (b->stream == key) pending.push_back(const_cast<Block*>(b));
    });
  }
  driver::ScopedContext scope(api_, context_);
  for (Block* b : pending) {
    if (settle(b)) continue;
    arena_of(b).index.erase(b);
    deferred_.add(b);
  }
  if (!pending.empty()) deferred_.close_batch(/*needs_sync=*/!retired);
  stats_.deferred_bytes = deferred_.bytes();
  events_.give_back(it->second.event);
  streams_.erase(it);
  last_key_ = kNoPendingWork;
  last_state_ = nullptr;
}

// --- deallocation -----------------------------------------------------------------

util::Status Pool::deallocate(std::uintptr_t address, std::uintptr_t stream, bool ordered) {
  if (address == 0) return util::Status::success();
  const std::uintptr_t key = ordered ? stream_key(stream) : kNoPendingWork;
  std::lock_guard<util::SpinLock> guard(lock_);
  Block* block = live_.erase(address);
  if (block == nullptr) {
    return {util::Error::invalid_value, "pointer is not a live tidepool allocation (double free or foreign)"};
  }
  bool settled = false;  // a free on another device's stream, waited for here
  if (ordered && !cached_stream(key)) {
    if (auto known = known_stream(key); !known) {
      util::Status refused = known.status();
      if (refused.error() == util::Error::other_device) {
        driver::ScopedContext scope(api_, context_);
        refused = driver::check(api_.streamSynchronize(reinterpret_cast<CUstream>(key)), "cuStreamSynchronize");
      }
      if (!refused) {
        live_.insert(address, block);  // refused: the block stays allocated
        return refused;
      }
      settled = true;
    }
  }
  stats_.frees++;
  stats_.live_bytes -= block->requested;
  stats_.handed_out_bytes -= block->size;
  block->requested = 0;
  block->buffer_id = 0;
  if (settled) {
    block->stream = kNoPendingWork;
    release_to_index(arena_of(block), block);
    return util::Status::success();
  }
  if (ordered) {
    block->stream = key;
    block->free_epoch = ++epoch_;
    unsynchronized_async_frees_ = true;
    release_to_index(arena_of(block), block);
    return util::Status::success();
  }
  block->is_free = true;
  block->stream = kNoPendingWork;
  // Fenced at once (or with the next fence while one is in flight), so the
  // block can come back as soon as the device is past it: a fence left open
  // until memory runs short only finishes after more memory has been made,
  // and a cudaFree loop would grow without end.
  deferred_.add(block);
  {
    driver::ScopedContext scope(api_, context_);
    deferred_.fence_when_idle();
  }
  stats_.deferred_bytes = deferred_.bytes();
  return util::Status::success();
}

// Two free neighbours merge unless each has work pending on a different
// stream: a block then never needs more than one stream's fence.
bool Pool::mergeable(Block* a, Block* b) {
  if (a->stream == b->stream || a->stream == kNoPendingWork || b->stream == kNoPendingWork) return true;
  return settle(a) || settle(b);
}

void Pool::release_to_index(Arena& arena, Block* block) {
  block->is_free = true;
  if (Block* prev = block->prev; prev != nullptr && prev->is_free && prev->in_index && mergeable(prev, block)) {
    arena.index.erase(prev);
    prev->size += block->size;
    prev->next = block->next;
    if (block->next != nullptr) block->next->prev = prev;
    if (prev->stream == kNoPendingWork) prev->stream = block->stream;
    prev->free_epoch = std::max(prev->free_epoch, block->free_epoch);
    blocks_.recycle(block);
    block = prev;
  }
  if (Block* next = block->next; next != nullptr && next->is_free && next->in_index && mergeable(block, next)) {
    arena.index.erase(next);
    block->size += next->size;
    block->next = next->next;
    if (next->next != nullptr) next->next->prev = block;
    if (block->stream == kNoPendingWork) block->stream = next->stream;
    block->free_epoch = std::max(block->free_epoch, next->free_epoch);
    blocks_.recycle(next);
  }
  arena.index.insert(block);
}

bool Pool::promote_deferred(bool wait) {
  if (deferred_.empty()) return false;
  const std::size_t promoted = deferred_.promote(wait, [this](Block* b) {
    b->stream = kNoPendingWork;
    release_to_index(arena_of(b), b);
  });
  stats_.deferred_bytes = deferred_.bytes();
  return promoted > 0;
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

bool Pool::synchronize_if_needed() {
  // Blocks freed in stream order may still be in use by queued work; pages
  // beneath them can be unmapped only once that work is done.
  return !unsynchronized_async_frees_ || synchronize_context();
}

std::size_t Pool::reclaim_idle_pages(std::size_t pages_needed, std::uintptr_t keep_begin, std::uintptr_t keep_end,
                                     bool may_synchronize, std::uintptr_t request_stream) {
  // Without a synchronisation, only blocks with nothing pending give pages.
  const bool all_idle = may_synchronize ? synchronize_if_needed() : !unsynchronized_async_frees_;
  std::size_t reclaimed = 0;
  for (Arena& arena : arenas_) {
    // Collect first: unbacking does not change the index, but keep it simple.
    std::vector<std::pair<space::Reservation*, std::size_t>> idle;
    arena.index.for_each_by_address([&](const Block* b) {
      if (reclaimed + idle.size() >= pages_needed) return;
      if (!all_idle && !settle_by_query(const_cast<Block*>(b), request_stream)) return;
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
    reclaim_idle_pages(std::numeric_limits<std::size_t>::max(), 0, 0, true, kNoPendingWork);
  } else if (synchronize_if_needed()) {
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

bool Pool::find_containing(std::uintptr_t address, std::uintptr_t* base, std::size_t* size,
                           std::uint64_t* buffer_id) const {
  std::lock_guard<util::SpinLock> guard(lock_);
  for (const auto& segment : segments_) {
    if (!segment->reservation->contains(address)) continue;
    for (const Block* b = segment->first; b != nullptr; b = b->next) {
      if (address < b->address || address >= b->address + b->size) continue;
      // The driver knows an allocation only as large as it was asked for.
      if (b->is_free || b->requested == 0 || address >= b->address + b->requested) return false;
      *base = b->address;
      *size = b->requested;
      if (buffer_id != nullptr) *buffer_id = b->buffer_id;
      return true;
    }
  }
  return false;
}

std::size_t Pool::servable_bytes(std::size_t driver_free) const {
  std::lock_guard<util::SpinLock> guard(lock_);
  // Whole mapped pages under free blocks can be re-stitched under any range;
  // pages shared with a live block (small blocks) cannot.
  std::size_t idle_pages = 0;
  for (const Arena& arena : arenas_) {
    arena.index.for_each_by_address([&](const Block* b) {
      const space::Reservation& r = *b->segment->reservation;
      if (r.is_chunk()) return;
      const std::size_t page = r.page_size();
      const std::uintptr_t first = util::align_up(b->address - r.base(), page) + r.base();
      const std::uintptr_t end = std::min<std::uintptr_t>(b->address + b->size, r.page_address(r.mapped_limit()));
      for (std::uintptr_t p = first; p + page <= end; p += page) {
        if (r.page(r.page_of(p)).residency != space::Residency::unmapped) ++idle_pages;
      }
    });
  }
  const std::size_t page = space_.page_size();
  const std::size_t held = space_.device_bytes();
  const std::size_t limit = space_.device_limit();
  const std::size_t budget_left = limit > held ? limit - held : 0;
  const std::size_t cached = space_.spare_bytes() + idle_pages * page;
  if (!space_.uses_vmm()) {
    // Chunks: only the largest free block, or a new chunk within the budget.
    std::size_t largest = 0;
    for (const Arena& arena : arenas_) {
      arena.index.for_each_by_address([&](const Block* b) { largest = std::max(largest, b->size); });
    }
    return std::max(largest, std::min(budget_left, driver_free));
  }
  return util::align_down(cached + std::min(budget_left, driver_free), page);
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
