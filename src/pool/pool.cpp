// Pool: the allocation ladder. See pool.hpp for the design; each concern it
// climbs through has a file of its own, with its invariant at the top:
//   arena.*              carving blocks out of free ones, merging on free
//   live_set.*           the live blocks: lookups, buffer ids, the use clock
//   segments.*           the VA reservations blocks are carved from
//   stream_fences.cpp    when a block freed in stream order may be reused (the
//                        per-stream bookkeeping is order::StreamFences)
//   deferred_frees.hpp   when a block freed with cudaFree semantics may be
//   stitcher.*           which idle pages stitching takes, and how many to hold
//   pool_trim.cpp        giving pages and chunks back to the driver
//   pool_queries.cpp     lookups, statistics and snapshots
//
// Fast path (allocate): round, policy->choose, carve, insert into the live
// map. It calls the driver only when the chosen range lies over unmapped
// pages or was last freed on another stream. Fast path (deallocate): live map
// lookup, coalesce, index insert.
#include "pool/pool.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <mutex>
#include <thread>

#include "order/order.hpp"

namespace tidepool::pool {

using order::stream_keys::stream_key;

util::Result<std::unique_ptr<Pool>> Pool::create(const driver::Driver& driver, space::AddressSpace& space,
                                                 CUcontext context, order::StreamRegistry& streams,
                                                 const PoolOptions& options) {
  auto policy = make_policy(options.policy);
  if (!policy) return util::Status(util::Error::bad_config, "unknown placement policy");
  return std::unique_ptr<Pool>(new Pool(driver, space, context, streams, options, std::move(policy)));
}

Pool::Pool(const driver::Driver& driver, space::AddressSpace& space, CUcontext context, order::StreamRegistry& streams,
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
  space_.set_unmap_check(&fence_check_);
}

Pool::~Pool() {
  std::lock_guard<util::SpinLock> guard(lock_);
  driver::ScopedContext scope(api_, context_);
  // Wait for work still using freed memory before the space unmaps it.
  (void)deferred_.promote(DeferredFrees::Wait::everything, [](Block*) {});
  fences_.clear();
  barrier_fences_.clear();
  if (fences_.unsynchronized() && api_.ctxSynchronize != nullptr) (void)api_.ctxSynchronize();
  events_.clear();
  segments_.for_each([this](const Segment& segment) { (void)space_.unreserve(segment.reservation); });
  space_.set_unmap_check(nullptr);
}

std::string_view Pool::policy_name() const { return policy_->name(); }

// --- allocation -----------------------------------------------------------------

util::Result<std::uintptr_t> Pool::allocate(std::size_t size, std::uintptr_t stream, bool ordered,
                                            std::uint16_t owner) {
  if (size == 0) return std::uintptr_t{0};
  owner = OwnerBytes::clamp(owner);
  if (size > (std::numeric_limits<std::size_t>::max() >> 2)) {
    std::lock_guard<util::SpinLock> guard(lock_);
    stats_.ooms++;
    size_classes_.failed(size);
    owners_.failed(owner);
    return util::Status(util::Error::out_of_memory, "request larger than any device");
  }
  const int arena_id = size <= options_.small_size ? 0 : 1;
  std::size_t rounded = util::align_up(size, arena_id == 0 ? options_.small_alignment : options_.large_alignment);
  rounded = util::align_up(policy_->round(rounded), options_.small_alignment);
  const std::uintptr_t key = ordered ? stream_key(stream) : kNoPendingWork;

  std::unique_lock<util::SpinLock> guard(lock_);
  if (ordered && !fences_.cached(key)) {
    if (util::Status known = fences_.check(key); !known) return known;
  }
  util::Status error;
  Block* block = allocate_locked(arena_id, rounded, key, ordered, &error);
  if (block == nullptr && mover_ != nullptr && error.error() == util::Error::out_of_memory) {
    block = allocate_after_pins(guard, arena_id, rounded, key, ordered, &error);
  }
  if (block == nullptr) {
    stats_.ooms++;
    size_classes_.failed(size);
    owners_.failed(owner);
    return error.ok() ? util::Status(util::Error::out_of_memory, "out of device memory") : error;
  }
  block->requested = size;
  block->owner = owner;
  live_.add(block);
  // Memory handed out lives on the device: host pages left under a freed
  // block come back before the new owner can queue work on them.
  if (mover_ != nullptr && space_.host_pages() > 0) {
    (void)bring_back_locked(*block, block->address, block->size, stream, 0);
  }
  stats_.allocations++;
  stats_.live_bytes += size;
  stats_.handed_out_bytes += block->size;
  const bool new_peak = stats_.live_bytes > stats_.peak_live_bytes;
  if (new_peak) stats_.peak_live_bytes = stats_.live_bytes;
  size_classes_.allocated(size);
  owners_.allocated(owner, size, new_peak);
  return block->address;
}

Block* Pool::allocate_locked(int arena_id, std::size_t rounded, std::uintptr_t stream, bool ordered,
                             util::Status* error) {
  Block* block = climb_ladder(arena_id, rounded, stream, ordered, error);
  // Blocks whose pending work could not be fenced go back; a later request
  // may find them finished.
  for (Block* set_aside : unsafe_) arena_of(set_aside).release(set_aside);
  unsafe_.clear();
  return block;
}

Block* Pool::place(Arena& arena, std::size_t rounded, std::uintptr_t stream, bool ordered, util::Status* error,
                   Miss* miss) {
  for (;;) {
    Block* block = try_place(arena, rounded, stream, ordered, error, miss);
    if (block != nullptr || !miss->fence_failed || unsafe_.size() >= kMaxSetAside) return block;
  }
}

Block* Pool::allocate_after_pins(std::unique_lock<util::SpinLock>& guard, int arena_id, std::size_t rounded,
                                 std::uintptr_t stream, bool ordered, util::Status* error) {
  // Pins last only while a submission is on its way to the driver: the
  // blocks they hold can be evicted soon after, so a request short of room
  // only because of them waits rather than fail, as it would not natively.
  // Bounded: a pin held while the device waits for this thread would
  // otherwise hold it for good.
  if (options_.pin_wait_ms == 0) return nullptr;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point give_up_at = Clock::now() + std::chrono::milliseconds(options_.pin_wait_ms);
  const std::size_t needed = util::round_up(rounded, space_.page_size()) / space_.page_size();
  // Pages that pins hold and that would make the room lacking; 0 when the
  // room is short for another reason (pins or not, the request fails).
  const auto pinned_in_the_way = [&]() -> std::size_t {
    const std::size_t pinned = live_.pinned_device_pages();
    const std::size_t unpinned = evictable_device_pages() + space_.available_pages();
    return pinned > 0 && unpinned < needed && pinned + unpinned >= needed ? pinned : 0;
  };
  Block* block = nullptr;
  std::size_t pinned = pinned_in_the_way();
  if (pinned == 0) return nullptr;
  stats_.pin_waits++;
  while (block == nullptr && pinned > 0) {
    const std::uint64_t seen = room_changes_.load(std::memory_order_acquire);
    guard.unlock();
    auto pause = std::chrono::microseconds(20);
    bool changed = false;
    bool last_try = false;
    while (!changed && !last_try) {
      std::this_thread::sleep_for(pause);
      pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(1));
      changed = room_changes_.load(std::memory_order_acquire) != seen;
      last_try = Clock::now() >= give_up_at;
    }
    guard.lock();
    const std::size_t host_before = space_.host_pages();
    block = allocate_locked(arena_id, rounded, stream, ordered, error);
    if (block != nullptr || last_try || error->error() != util::Error::out_of_memory) break;
    // Unpinned pages could have moved and none did: the room is short for
    // another reason (the host cache full, a capture refusing moves).
    if (evictable_device_pages() > 0 && space_.host_pages() == host_before) break;
    pinned = pinned_in_the_way();
  }
  return block;
}

Block* Pool::climb_ladder(int arena_id, std::size_t rounded, std::uintptr_t stream, bool ordered, util::Status* error) {
  Arena& arena = arenas_[arena_id];

  if (deferred_worth_promoting()) {
    // Enough cudaFree frees to shape the layout join the index first, all
    // of them: behind a device barrier where one can be made, else waiting
    // for their fences (the wait cudaFree itself makes at every free, made
    // here once per batch). Taking only those whose fences happen to be done
    // would make the layout depend on how far the device lags, different
    // every training step, and every difference costs page moves; taking
    // them all gives every step the layout of a device caught up. The
    // barrier does so without the host waiting: a wait here drains the
    // device's queue, and a training step under the preload ran 45% slower
    // on an H100 for it.
    driver::ScopedContext scope(api_, context_);
    promote_all_deferred();
  }
  // The common case: a cached block, backed, same stream.
  Miss last;  // read only after a place() that failed, which wrote it
  if (Block* b = place(arena, rounded, stream, ordered, error, &last)) return b;
  return climb_rungs(arena, rounded, stream, ordered, error, last);
}

Block* Pool::climb_rungs(Arena& arena, std::size_t rounded, std::uintptr_t stream, bool ordered, util::Status* error,
                         Miss last) {
  // Each rung either makes the retry succeed or moves to the next.
  driver::ScopedContext scope(api_, context_);
  for (int rung = 0; rung < 6; ++rung) {
    const bool no_fit = last.no_fit;  // no free block large enough
    util::Status step;
    switch (rung) {
      case 0:  // cudaFree frees: all behind a device barrier, else those whose fences completed
        if (!promote_deferred_behind_barrier() && !promote_deferred(DeferredFrees::Wait::none)) continue;
        break;
      case 1:  // no block fits: more address space (or, without VMM, a new chunk)
        if (!no_fit) continue;
        step = add_segment(arena, rounded);
        if (!step) {
          *error = step;
          continue;
        }
        break;
      case 2:  // wait for outstanding deferred frees, proving any fence a synchronisation must
        if (!promote_deferred(DeferredFrees::Wait::everything)) continue;
        break;
      case 3: {  // stitch: unmap idle pages elsewhere and back this range with them
        if (!space_.uses_vmm() || no_fit) continue;
        const std::size_t short_by = last.pages_short;
        if (short_by == 0 || reclaim_idle_pages(short_by, last.keep_begin, last.keep_end, true, kNoPendingWork,
                                                /*learn=*/true) < short_by)
          continue;
        break;
      }
      case 4:  // without VMM: give back empty chunks and retry with a new one
        if (space_.uses_vmm()) continue;
        if (trim_chunks() == 0) continue;
        step = add_segment(arena, rounded);
        if (!step) {
          *error = step;
          continue;
        }
        break;
      case 5: {  // evict: pages of idle live blocks move to the host cache
        if (mover_ == nullptr || no_fit || last.pages_short == 0) continue;
        if (evict_locked(last.pages_short, last.keep_begin, last.keep_end) == 0) continue;
        break;
      }
      default: continue;
    }
    if (Block* b = place(arena, rounded, stream, ordered, error, &last)) return b;
  }
  if (error->ok() || last.no_fit) {
    *error = util::Status(util::Error::out_of_memory, "out of device memory");
  }
  return nullptr;
}

inline Block* Pool::carve_placed(Arena& arena, Block* chosen, const Request& request, bool ordered, util::Status* error,
                                 Miss* miss) {
  Block* block = arena.carve(chosen, request.size, request);
  if (util::Status s = make_stream_safe(block, request.stream, ordered); !s) {
    // Not known to be safe: set it aside (out of the index, merged with
    // nothing) and let the request look elsewhere.
    block->is_free = true;
    unsafe_.push_back(block);
    *miss = Miss{.no_fit = false, .fence_failed = true, .pages_short = 0, .keep_begin = 0, .keep_end = 0};
    *error = s;
    return nullptr;
  }
  *error = util::Status::success();
  return block;
}

// The cached path: a block chosen whose range is backed is carved here; a
// range with pages to back goes to place_unbacked, out of line, so that its
// stack frame is not paid by every cached allocation.
Block* Pool::try_place(Arena& arena, std::size_t rounded, std::uintptr_t stream, bool ordered, util::Status* error,
                       Miss* miss, bool promoted) {
  const Request request{rounded, stream, arena.id() == 0, sequence_++};
  Block* chosen = policy_->choose(arena.index(), request);
  if (chosen == nullptr) {
    *miss = Miss{.no_fit = true, .fence_failed = false, .pages_short = 0, .keep_begin = 0, .keep_end = 0};
    *error = util::Status(util::Error::out_of_memory, "no free block fits");
    return nullptr;
  }
  const std::uintptr_t begin = carve_begin(*chosen, request);
  const std::size_t missing = space_.unbacked_pages(*chosen->segment->reservation, begin, rounded);
  if (missing > 0) return place_unbacked(arena, request, chosen, begin, missing, ordered, error, miss, promoted);
  return carve_placed(arena, chosen, request, ordered, error, miss);
}

Block* Pool::place_unbacked(Arena& arena, const Request& request, Block* chosen, std::uintptr_t begin,
                            std::size_t missing, bool ordered, util::Status* error, Miss* miss, bool promoted) {
  const std::size_t rounded = request.size;
  const std::uintptr_t stream = request.stream;
  space::Reservation* reservation = chosen->segment->reservation;
  if (!deferred_.empty() && !promoted) {
    // Freed memory is reused before new memory is created: cudaFree frees go
    // back first, and the request looks again. Without it a device that lags
    // the host makes the pool grow by what the lag holds. Under the preload
    // they go back behind a device barrier, with no host wait. Otherwise
    // their fences still running are waited for: the wait a real cudaFree
    // makes at the free, paid only when the pool would otherwise grow; a
    // fence the events cannot prove (no complete stream registry, a capture)
    // takes a context synchronisation, as cudaFree itself would, and never
    // during a capture.
    driver::ScopedContext scope(api_, context_);
    if (promote_all_deferred()) return try_place(arena, rounded, stream, ordered, error, miss, /*promoted=*/true);
  }
  if (space_.uses_vmm()) {
    // A page stitching took from under this range without waiting may still
    // be read here by work queued before: its mapping must go before this
    // range's own. Where that page is idle where it went (under a free
    // block that may give it, now or behind a new barrier), it comes back,
    // its mapping here current again, with no host wait. Else the host
    // waits for that work alone, and the request keeps the place its policy
    // chose: the layout is then the one an idle device would give, whatever
    // the lag. Only where the wait is refused or fails (a capture, a failed
    // synchronisation) does a free block already backed, of one of the next
    // sizes up, take the request instead; failing that the range is set
    // aside. (Taking that backed block rather than wait made where blocks
    // land depend on how far the device lagged: on resnet50_b16 the pool
    // held 3 to 8 pages more, run to run, for about as many waits; setting
    // every such range aside made the layout drift, and the pool grew by up
    // to 9%; a block not backed but clear of such mappings drifted too, with
    // 20 times the page moves. decisions.md.)
    driver::ScopedContext scope(api_, context_);
    in_the_way_.clear();
    space_.pending_in_the_way(*reservation, begin, rounded, &in_the_way_);
    if (!in_the_way_.empty() && space_.parks_pages() && mover_ == nullptr) {
      // The page parked here is lent to another place. Pulling it back costs
      // no driver call, but while the slack over the peak is its one page
      // (a small working set: a 512 B and an 8 MiB block in turn) the other
      // place pulls it back at its next call, a page move and a barrier on
      // every call while the device lags by one. Where the hold has room
      // for a page of its own here, the host waits once for the old work
      // on the parked mapping instead, and the range takes a new page.
      const bool own_page =
          stitcher_.slack_is_one_page(stats_.peak_live_bytes) &&
          missing <= std::min(stitcher_.growth_room_if_asked(*reservation, begin, rounded, stats_.peak_live_bytes),
                              space_.available_pages() - space_.spare_pages());
      // (A wait a capture forbids falls back to pulling the page back.)
      const bool waited = own_page && wait_for_pages_in_the_way();
      if (waited || stitcher_.free_parked_pages(*reservation, begin, rounded, ordered ? stream : kNoPendingWork,
                                                pages_with_work_pending_from(), stitching_barriers(ordered),
                                                /*may_wait=*/false) > 0) {
        in_the_way_.clear();
        space_.pending_in_the_way(*reservation, begin, rounded, &in_the_way_);
      }
    }
    if (!in_the_way_.empty() && !wait_for_pages_in_the_way()) {
      if (Block* backed = backed_fit(arena, request, chosen)) {
        chosen = backed;
        begin = carve_begin(*chosen, request);
        reservation = chosen->segment->reservation;
        missing = 0;
        stats_.pending_page_detours++;
      } else {
        // Not provable now (a capture refuses the wait, or the wait and the
        // synchronisation failed): the range is set aside, as one whose
        // pending work cannot be fenced is.
        Block* block = arena.carve(chosen, rounded, request);
        block->is_free = true;
        unsafe_.push_back(block);
        *miss = Miss{.no_fit = false, .fence_failed = true, .pages_short = 0, .keep_begin = 0, .keep_end = 0};
        *error = util::Status(util::Error::driver_error, "cannot tell when queued work leaves a page");
        return nullptr;
      }
    }
  }
  if (missing > 0) {
    // Stitch before growing: idle cached pages elsewhere back this range
    // before any new physical memory is created, so what the pool holds
    // tracks what is live rather than the history of its layout, except for
    // the growth the layout has shown it needs (stitcher.hpp). Within
    // that growth each place keeps pages of its own; beyond it, pages parked
    // here come back first, at no driver cost.
    // Room the budget does not leave is no room: stitching goes on rather
    // than miss and synchronise the context for pages it could take now.
    const std::size_t budget_room = space_.available_pages() - space_.spare_pages();
    const std::size_t growth_room =
        std::min(stitcher_.growth_room(*reservation, begin, rounded, stats_.peak_live_bytes), budget_room);
    const auto short_of_pages = [&] { return missing > space_.spare_pages() + growth_room; };
    if (options_.stitch_before_grow && space_.uses_vmm() && short_of_pages()) {
      driver::ScopedContext scope(api_, context_);
      // Pages of blocks freed before a device barrier are taken at once, even
      // while their work may still run (stitcher.hpp); other stream-ordered
      // blocks give pages once their stream is past them. A block freed on
      // the requesting stream whose work is still queued makes a device
      // barrier and gives them too (no host wait); where none can be made
      // (a capture, a page mover, `free_barrier:off`), the host waits for the
      // requesting stream's own earlier work. No context synchronisation
      // here, where the budget still has room.
      const std::uintptr_t may_wait_for = ordered ? stream : kNoPendingWork;
      if (space_.parks_pages()) {
        stitcher_.free_parked_pages(*reservation, begin, rounded, may_wait_for, pages_with_work_pending_from(),
                                    stitching_barriers(ordered));
      }
      if (short_of_pages()) {
        reclaim_idle_pages(missing - space_.spare_pages() - growth_room, begin, begin + rounded, false, may_wait_for,
                           /*learn=*/true, /*wait_for_barrier=*/false, stitching_barriers(ordered));
      }
    }
    const std::size_t available = space_.available_pages();
    if (missing > available) {
      // When the pool holds more than the budget (pages whose release the
      // driver refused still count), the first pages stitching frees go back
      // to the driver (space's unback) rather than become spare, so
      // stitching must free that many more.
      const std::size_t limit_pages = space_.pool_limit() / space_.page_size();
      const std::size_t over_budget = space_.device_pages() > limit_pages ? space_.device_pages() - limit_pages : 0;
      *miss = Miss{.no_fit = false,
                   .fence_failed = false,
                   .pages_short = missing - available + over_budget,
                   .keep_begin = begin,
                   .keep_end = begin + rounded};
      *error = util::Status(util::Error::out_of_memory, "device budget exhausted");
      return nullptr;
    }
    driver::ScopedContext scope(api_, context_);
    if (util::Status s = space_.back(*reservation, begin, rounded); !s) {
      *miss = Miss{.no_fit = false, .fence_failed = false, .pages_short = 0, .keep_begin = 0, .keep_end = 0};
      *error = s;
      return nullptr;
    }
  }
  return carve_placed(arena, chosen, request, ordered, error, miss);
}

std::uintptr_t Pool::carve_begin(const Block& chosen, const Request& request) const {
  const bool high = policy_->carve_end(chosen, request) == CarveEnd::high;
  return high ? chosen.address + chosen.size - request.size : chosen.address;
}

Block* Pool::backed_fit(Arena& arena, const Request& request, const Block* chosen) {
  // A bounded look: this is the slow path, but it must not become a walk of
  // every free block.
  constexpr int kLooks = 32;
  int looks = 0;
  for (Block* b = arena.index().best_fit(request.size); b != nullptr && looks < kLooks;
       b = arena.index().next_by_size(b), ++looks) {
    if (b == chosen) continue;
    const std::uintptr_t begin = carve_begin(*b, request);
    if (space_.unbacked_pages(*b->segment->reservation, begin, request.size) == 0) return b;
  }
  return nullptr;
}

bool Pool::wait_for_pages_in_the_way() {
  bool capture_checked = false;
  for (const space::PendingUse& use : in_the_way_) {
    if (fences_.finished(use.key, use.epoch)) continue;
    // While a capture runs, a host wait may invalidate it (in global mode,
    // from any thread, as an event query is reported to): refused, as a
    // synchronisation is. Relaxed captures too: the registry does not tell
    // the modes apart.
    if (!capture_checked) {
      capture_checked = true;
      if (deferred_.capture_in_progress()) return false;
    }
    stats_.pending_page_waits++;
    if (fences_.query(use.key, use.epoch, use.key, /*wait_for_barrier=*/true)) continue;
    // A wait that failed proves nothing; a context synchronisation does.
    return synchronize_context();
  }
  return true;
}

// --- deallocation -----------------------------------------------------------------

util::Status Pool::deallocate(std::uintptr_t address, std::uintptr_t stream, bool ordered) {
  if (address == 0) return util::Status::success();
  const std::uintptr_t key = ordered ? stream_key(stream) : kNoPendingWork;
  std::lock_guard<util::SpinLock> guard(lock_);
  Block* block = live_.remove(address);
  if (block == nullptr) {
    return {util::Error::invalid_value, "pointer is not a live tidepool allocation (double free or foreign)"};
  }
  // One branch on the free path: a block freed while shared still has holds.
  if (block->import_holds > 0) [[unlikely]] {
    live_.restore(block);
    if (block->freed_while_shared) {
      return {util::Error::invalid_value, "pointer is not a live tidepool allocation (double free or foreign)"};
    }
    // Other processes map it: the free takes effect when the last lets go
    // (release_import_hold), so they never see its bytes reused.
    block->freed_while_shared = true;
    return util::Status::success();
  }
  bool settled = false;  // a free on another device's stream, waited for here
  if (ordered && !fences_.cached(key)) {
    if (util::Status refused = fences_.check(key); !refused) {
      if (refused.error() == util::Error::other_device) {
        driver::ScopedContext scope(api_, context_);
        refused = driver::check(api_.streamSynchronize(reinterpret_cast<CUstream>(key)), "cuStreamSynchronize");
      }
      if (!refused) {
        live_.restore(block);  // refused: the block stays allocated
        return refused;
      }
      settled = true;
    }
  }
  take_back_locked(block, key, ordered, settled);
  return util::Status::success();
}

void Pool::take_back_locked(Block* block, std::uintptr_t key, bool ordered, bool settled) {
  stats_.frees++;
  room_changed();
  stats_.live_bytes -= block->requested;
  stats_.handed_out_bytes -= block->size;
  size_classes_.freed(block->requested);
  owners_.freed(block->owner, block->requested);
  block->requested = 0;
  if (mover_ != nullptr) mover_->forget(block->buffer_id);
  block->buffer_id = 0;
  block->freed_at = stats_.allocations;
  if (settled) {
    block->stream = kNoPendingWork;
    arena_of(block).release(block);
    return;
  }
  if (ordered) {
    block->stream = key;
    block->free_epoch = fences_.freed();
    arena_of(block).release(block);
    return;
  }
  if (frees_in_legacy_order()) {
    // As promote_deferred_behind_barrier does for a batch, for this block alone.
    const std::uint64_t epoch = fences_.freed();
    barrier_epoch_ = epoch;
    stats_.legacy_order_barriers++;
    block->stream = kAfterBarrier;
    block->free_epoch = epoch;
    arena_of(block).release(block);
    return;
  }
  block->is_free = true;
  block->stream = kNoPendingWork;
  // Fenced at once (or with the next fence while one is in flight), so the
  // block can come back as soon as the device is past it: a fence left open
  // until memory runs short only finishes after more memory has been made,
  // and a cudaFree loop would grow without end. A block handed out was
  // backed whole, so all of it counts.
  deferred_.add(block, block->size);
  // They go back to the index at the next allocation (climb_ladder), never
  // here: a free does not wait for the device. Under a complete registry
  // they go back behind a device barrier, which needs no fence: the free
  // makes no driver call at all.
  if (!frees_behind_barrier() || barrier_failed_ || !registry_.complete()) {
    driver::ScopedContext scope(api_, context_);
    deferred_.fence_when_idle();
  }
  stats_.deferred_bytes = deferred_.bytes();
}

// --- blocks other processes map (IPC) --------------------------------------------

util::Status Pool::hold_for_import(std::uintptr_t address, std::uint64_t buffer_id,
                                   space::AddressSpace::SharedPages* pages,
                                   std::chrono::steady_clock::time_point wait_until) {
  std::unique_lock<util::SpinLock> guard(lock_);
  const auto find = [&]() -> Block* {
    Block* block = live_.starting_at(address);
    return block == nullptr || block->buffer_id != buffer_id || block->freed_while_shared ? nullptr : block;
  };
  Block* block = find();
  if (block == nullptr) return {util::Error::invalid_value, "the shared block was freed"};
  driver::ScopedContext scope(api_, context_);
  // Under a page mover the block is pinned while the wait below lets the
  // lock go, so that no eviction moves its pages out (or back behind the
  // wait). Pages on the host come back first, through copies on the mover's
  // streams that the wait covers; those left there (no room, a
  // submission's pin) are shared where they are.
  Block* pinned = nullptr;
  if (mover_ != nullptr) {
    pinned = block;
    pinned->pins++;
    if (host_pages_in(*block->segment->reservation, block->address, block->size) > 0) {
      (void)bring_back_locked(*block, block->address, block->size, /*stream=*/0, /*own_pins=*/1);
    }
  }
  // The block, or pages stitched under it, may have come to its owner while
  // an earlier owner's work (or a page mover's copy) was still queued:
  // ordered after it on this context's streams (a device barrier, the
  // legacy stream's order, a stream's own order), but not before the other
  // process's work. No mark on the block says so (stitched pages carry
  // none), so any free since the last synchronisation counts.
  if (fences_.unsynchronized() || mover_ != nullptr) {
    const util::Status waited = wait_for_queued_work(guard, wait_until);
    if (pinned != nullptr && pinned->buffer_id == buffer_id && pinned->pins > 0 && --pinned->pins == 0) {
      room_changed();  // as release_pins
    }
    if (!waited) return waited;
    stats_.import_waits++;
    block = find();  // the owner may have freed it meanwhile
    if (block == nullptr) return {util::Error::invalid_value, "the shared block was freed"};
  }
  const space::Reservation& r = *block->segment->reservation;
  if (util::Status shared = space_.share(r, block->address, block->size, pages); !shared) return shared;
  block->import_holds++;
  return util::Status::success();
}

util::Status Pool::wait_for_queued_work(std::unique_lock<util::SpinLock>& guard,
                                        std::chrono::steady_clock::time_point wait_until) {
  using Clock = std::chrono::steady_clock;
  using Gap = order::ContextFence::Gap;
  // A fence of the context's streams, as a cudaFree fence: it reorders
  // nothing, so work that waits for the other process (a flag it sets once
  // it has the block) costs it its open when the deadline passes, never the
  // program's later work or an IPC open worker for long.
  order::ContextFence fence;
  std::vector<CUstream> streams;
  std::uint64_t epoch = 0;
  for (;;) {
    // A record on a capturing stream, or a synchronisation, would
    // invalidate the capture: it ends first. The question reads no pool
    // state, so the program's threads allocate meanwhile.
    guard.unlock();
    while (deferred_.capture_in_progress()) {
      if (Clock::now() >= wait_until) {
        guard.lock();
        return {util::Error::driver_error, "a stream capture outlasted the wait for the block's earlier work"};
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    guard.lock();
    epoch = fences_.epoch();
    fence = order::ContextFence{};
    // A page mover's own copy streams are no streams the registry lists:
    // the fence names them.
    const Gap gap = fence.record(api_, events_, registry_, context_, &streams, /*known_gap=*/false, mover_streams_);
    if (gap == Gap::failed) {
      fence.release(api_, events_);
      return {util::Error::driver_error, "could not record a wait for the block's earlier work"};
    }
    if (gap == Gap::capturing || (gap == Gap::unseen && deferred_.capture_in_progress())) {
      fence.release(api_, events_);  // a capture began meanwhile
      continue;
    }
    break;
  }
  // Where events cannot answer, only a synchronisation does, and no
  // deadline bounds it.
  const bool synchronize = fence.needs_sync();
  CUresult result = CUDA_SUCCESS;
  guard.unlock();
  if (synchronize) {
    result = api_.ctxSynchronize != nullptr ? api_.ctxSynchronize() : CUDA_ERROR_NOT_SUPPORTED;
  } else {
    while ((result = fence.query(api_)) == CUDA_ERROR_NOT_READY && Clock::now() < wait_until) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  guard.lock();
  fence.release(api_, events_);
  if (result == CUDA_ERROR_NOT_READY) {
    return {util::Error::driver_error, "work queued before the block came to its owner outlasted the wait"};
  }
  if (result != CUDA_SUCCESS) return driver::check(result, synchronize ? "cuCtxSynchronize" : "cuEventQuery");
  fences_.synchronized_through(epoch);
  return util::Status::success();
}

bool Pool::release_import_hold(std::uintptr_t address, std::uint64_t buffer_id) {
  std::lock_guard<util::SpinLock> guard(lock_);
  Block* block = live_.starting_at(address);
  if (block == nullptr || block->buffer_id != buffer_id || block->import_holds == 0) return false;
  if (--block->import_holds > 0 || !block->freed_while_shared) return false;
  live_.remove(address);
  take_back_locked(block, kNoPendingWork, /*ordered=*/false, /*settled=*/false);
  return true;
}

bool Pool::deferred_worth_promoting() const {
  // Event queries cost a driver call each: a few small frees wait for a
  // request that misses (try_place promotes then), enough of them to shape
  // the layout go back as soon as their fences finish.
  constexpr std::size_t kBlocks = 32;
  if (!deferred_.may_finish_unaided()) return false;
  return deferred_.size() >= kBlocks || deferred_.bytes() >= space_.device_bytes() / 64;
}

bool Pool::promote_all_deferred() {
  return promote_deferred_behind_barrier() || promote_deferred(DeferredFrees::Wait::everything);
}

bool Pool::promote_deferred(DeferredFrees::Wait wait) {
  if (deferred_.empty()) return false;
  const std::size_t promoted = deferred_.promote(wait, [this](Block* b) {
    b->stream = kNoPendingWork;
    arena_of(b).release(b);
  });
  stats_.deferred_bytes = deferred_.bytes();
  return promoted > 0;
}

// --- segments and pages -----------------------------------------------------------

util::Status Pool::add_segment(Arena& arena, std::size_t min_bytes) {
  const std::size_t page = space_.page_size();
  std::size_t bytes = 0;
  if (space_.uses_vmm()) {
    // VA is cheap: reserve enough that one segment normally serves the run.
    const std::size_t whole = options_.segment_bytes != 0 ? options_.segment_bytes : 2 * space_.device_limit();
    bytes = std::max(util::align_up(whole, page), util::align_up(min_bytes, page));
  } else if (arena.id() == 0) {
    bytes = util::align_up(std::max<std::size_t>(min_bytes, 2 * util::MiB), page);
  } else {
    bytes = min_bytes <= 10 * util::MiB ? 20 * util::MiB : util::align_up(min_bytes, page);
  }
  auto reservation = space_.reserve(bytes);
  if (!reservation) return reservation.status();
  Block* whole = blocks_.make();
  whole->address = reservation.value()->base();
  whole->size = reservation.value()->size();
  whole->stream = kNoPendingWork;
  whole->is_free = true;
  arena.add(segments_.add(reservation.value(), whole, arena.id()));
  return util::Status::success();
}

void Pool::set_page_mover(PageMover* mover) {
  std::lock_guard<util::SpinLock> guard(lock_);
  mover_ = mover;
  mover_orders_uses_ = mover != nullptr && mover->orders_uses();
  mover_streams_ = mover != nullptr ? mover->own_streams() : std::vector<CUstream>{};
}

util::Status Pool::make_resident(std::uintptr_t address, std::size_t bytes, std::uintptr_t stream) {
  std::lock_guard<util::SpinLock> guard(lock_);
  Block* block = live_.at(address);
  if (block == nullptr) return {util::Error::invalid_value, "pointer is not inside a live tidepool allocation"};
  live_.mark_used(block);
  if (mover_ == nullptr || space_.host_pages() == 0) return util::Status::success();
  const std::uintptr_t end = block->address + block->size;
  const std::uintptr_t last = bytes > end - address ? end : address + bytes;
  if (last <= address) return util::Status::success();
  driver::ScopedContext scope(api_, context_);
  return bring_back_locked(*block, address, last - address, stream, 0);
}

util::Status Pool::bring_back_locked(Block& block, std::uintptr_t begin, std::size_t length, std::uintptr_t stream,
                                     std::uint32_t own_pins, const Pins* caller_pins) {
  space::Reservation& r = *block.segment->reservation;
  if (r.is_chunk() || length == 0) return util::Status::success();
  // Only the range's end pages can lie under another block too, and only
  // one on the host would move (asked first: a page may hold thousands of
  // small blocks).
  const auto stays = [&](std::size_t page) {
    return r.page(page).residency == space::Residency::host && shares_a_held_page(block, r, page, caller_pins);
  };
  std::size_t first = r.page_of(begin);
  std::size_t end = r.page_of(begin + length - 1) + 1;  // past the last page
  if (stays(first)) ++first;
  if (end > first && stays(end - 1)) --end;
  if (end <= first) return util::Status::success();
  const std::uintptr_t end_address = std::min(begin + length, r.page_address(end));
  begin = std::max(begin, r.page_address(first));
  length = end_address - begin;
  const std::size_t on_host = host_pages_in(r, begin, length);
  if (on_host == 0) return util::Status::success();
  // Another submission named the block and may not be queued yet: it could
  // land beside the gate rather than behind it. The pages stay on the host,
  // where every access still reads the right bytes.
  if (block.pins > own_pins) return util::Status::success();
  // Another device may be reading these host pages, and no gate of this
  // pool waits for its streams: they stay where they are for good.
  if (block.peer_held && block.read_on_host) return util::Status::success();
  driver::ScopedContext scope(api_, context_);
  if (space_.available_pages() < on_host) {
    // Free memory first, live memory last: idle pages of free blocks, then
    // eviction of other live blocks.
    reclaim_idle_pages(on_host - space_.available_pages(), begin, begin + length, true, kNoPendingWork,
                       /*learn=*/false);
  }
  if (space_.available_pages() < on_host) evict_locked(on_host - space_.available_pages(), begin, begin + length);
  util::Status s = mover_->bring_back(r, begin, length, stream);
  // A whole bring-back is a gate (or a context synchronisation): whatever
  // read the host pages before it has finished.
  if (host_pages_in(r, block.address, block.size) == 0) block.read_on_host = false;
  stats_.host_pages = space_.host_pages();
  return s;
}

bool Pool::shares_a_held_page(const Block& block, const space::Reservation& r, std::size_t page,
                              const Pins* caller_pins) {
  const std::uintptr_t page_begin = r.page_address(page);
  const std::uintptr_t page_end = page_begin + r.page_size();
  const auto holds_in_place = [&](const Block& b) {
    if (b.is_free || b.requested == 0) return false;
    const std::uint32_t callers = caller_pins != nullptr && caller_pins->holds(b.buffer_id) ? 1 : 0;
    return b.peer_held || b.pins > callers;
  };
  for (const Block* b = block.prev; b != nullptr && b->address + b->size > page_begin; b = b->prev) {
    if (holds_in_place(*b)) return true;
  }
  for (const Block* b = block.next; b != nullptr && b->address < page_end; b = b->next) {
    if (holds_in_place(*b)) return true;
  }
  return false;
}

std::size_t Pool::host_pages_in(const space::Reservation& r, std::uintptr_t begin, std::size_t length) {
  if (r.is_chunk() || length == 0) return 0;
  std::size_t on_host = 0;
  for (std::size_t p = r.page_of(begin); p <= r.page_of(begin + length - 1); ++p) {
    on_host += r.page(p).residency == space::Residency::host ? 1 : 0;
  }
  return on_host;
}

// Inlined into the loop below, its only caller: a launch's words pay no call.
[[gnu::always_inline]] inline bool Pool::use_for_submission_locked(SubmittedWord* word, std::uintptr_t stream,
                                                                   OnHost on_host, Pins* pins) {
  word->host_pages = 0;
  word->still_on_host = 0;
  Block* block = live_.at(word->address);
  if (block == nullptr) return false;
  live_.mark_used(block);
  const bool first_peer_use = on_host == OnHost::bring_back_for_peer && !block->peer_held;
  if (on_host == OnHost::bring_back_for_peer) block->peer_held = true;
  bool pinned = pins->holds(block->buffer_id);
  word->pinned_block = false;
  if (!pinned && pins->count < Pins::kMax) {
    pins->pins[pins->count++] = Pins::Pin{this, block, block->buffer_id};
    block->pins++;
    pinned = true;
    word->pinned_block = true;
  }
  // Beyond Pins::kMax the block is not pinned: it is not brought back
  // either, since another submission's pin could not be told from ours.
  pins->overflow = pins->overflow || !pinned;
  const std::uint32_t own_pins = pinned ? 1 : 0;
  word->block = LaunchedBlock{block->address, block->buffer_id, block->last_use};
  if (mover_ == nullptr) return true;
  if (mover_orders_uses_) mover_->before_use(block->buffer_id, stream);
  space::Reservation& r = *block->segment->reservation;
  word->host_pages = space_.host_pages() == 0 ? 0 : host_pages_in(r, block->address, block->size);
  if (word->host_pages == 0) {
    // Pages brought back before another device first names the block (at
    // its allocation, on a hint, for this pool's own launches) are filled
    // behind a gate of this pool's streams only: that device's stream must
    // find the bytes in place before it is queued.
    if (first_peer_use) mover_->wait_for_copies_in();
    return true;
  }
  if (on_host == OnHost::bring_back_now || on_host == OnHost::bring_back_for_peer) {
    driver::ScopedContext scope(api_, context_);
    (void)bring_back_locked(*block, block->address, block->size, stream, own_pins, pins);
    if (mover_->has_unreadable_pages()) mover_->make_readable(r, block->address, block->size);
    // Another device's stream is in no gate of this pool: it must find the
    // bytes in place before it is queued.
    if (on_host == OnHost::bring_back_for_peer) mover_->wait_for_copies_in();
    word->still_on_host = host_pages_in(r, block->address, block->size);
  } else {
    // bring_back_later: bring_back_for_launch makes them readable.
    if (on_host == OnHost::read_there && mover_->has_unreadable_pages()) {
      driver::ScopedContext scope(api_, context_);
      mover_->make_readable(r, block->address, block->size);
    }
    word->still_on_host = word->host_pages;
  }
  // bring_back_later: bring_back_for_launch decides.
  if (word->still_on_host > 0 && on_host != OnHost::bring_back_later) block->read_on_host = true;
  return true;
}

std::size_t Pool::use_for_submission(std::span<SubmittedWord> words, std::uintptr_t stream, OnHost on_host,
                                     Pins* pins) {
  std::size_t found = 0;
  std::lock_guard<util::SpinLock> guard(lock_);
  for (SubmittedWord& word : words) {
    word.found = use_for_submission_locked(&word, stream, on_host, pins);
    if (word.found) ++found;
  }
  return found;
}

bool Pool::hold_for_graph(std::uintptr_t address, std::uintptr_t stream, LaunchedBlock* held) {
  std::lock_guard<util::SpinLock> guard(lock_);
  Block* block = live_.at(address);
  if (block == nullptr) return false;
  block->graph_holds++;
  *held = LaunchedBlock{block->address, block->buffer_id, block->last_use};
  if (mover_ == nullptr || space_.host_pages() == 0) return true;
  driver::ScopedContext scope(api_, context_);
  (void)bring_back_locked(*block, block->address, block->size, stream, 0);
  if (mover_->has_unreadable_pages()) mover_->make_readable(*block->segment->reservation, block->address, block->size);
  return true;
}

void Pool::release_graph_holds(const LaunchedBlock* held, std::size_t count) {
  std::lock_guard<util::SpinLock> guard(lock_);
  for (std::size_t i = 0; i < count; ++i) {
    Block* block = live_.starting_at(held[i].address);
    if (block != nullptr && block->buffer_id == held[i].buffer_id && block->graph_holds > 0) block->graph_holds--;
  }
}

void Pool::release_pins(const Pins& pins) {
  // A pool a launch asked that owned none of its words holds none of its
  // pins: no lock.
  if (std::none_of(pins.pins, pins.pins + pins.count, [this](const Pins::Pin& pin) { return pin.pool == this; })) {
    return;
  }
  std::lock_guard<util::SpinLock> guard(lock_);
  for (std::size_t i = 0; i < pins.count; ++i) {
    const Pins::Pin& pin = pins.pins[i];
    if (pin.pool != this) continue;
    // Freed since (another thread's free: the pin went with it, and a free
    // or recycled block has another buffer id).
    auto* block = static_cast<Block*>(pin.block);
    if (block->buffer_id == pin.buffer_id && block->pins > 0 && --block->pins == 0) room_changed();
  }
}

Pool::LaunchPages Pool::bring_back_for_launch(const LaunchedBlock* blocks, std::size_t count, std::uintptr_t stream,
                                              std::uint64_t spared_from, const Pins& pins) {
  LaunchPages pages;
  std::lock_guard<util::SpinLock> guard(lock_);
  if (mover_ == nullptr || space_.host_pages() == 0) return pages;
  driver::ScopedContext scope(api_, context_);
  spared_from_ = spared_from;
  for (std::size_t i = 0; i < count; ++i) {
    // Freed since the scan (another thread): its pages are no longer this
    // launch's to bring back.
    Block* block = live_.at(blocks[i].address);
    if (block == nullptr || block->buffer_id != blocks[i].buffer_id) continue;
    space::Reservation& r = *block->segment->reservation;
    const std::size_t on_host = host_pages_in(r, block->address, block->size);
    if (on_host == 0) continue;
    pages.before += on_host;
    (void)bring_back_locked(*block, block->address, block->size, stream, pins.holds(block->buffer_id) ? 1 : 0, &pins);
    if (mover_->has_unreadable_pages()) mover_->make_readable(r, block->address, block->size);
    const std::size_t left = host_pages_in(r, block->address, block->size);
    if (left > 0) block->read_on_host = true;
    pages.after += left;
  }
  spared_from_ = 0;
  stats_.host_pages = space_.host_pages();
  return pages;
}

void Pool::launched(std::uintptr_t kernel, const LaunchedBlock* blocks, std::size_t count, bool all_blocks) {
  std::lock_guard<util::SpinLock> guard(lock_);
  if (mover_ == nullptr) return;
  driver::ScopedContext scope(api_, context_);
  LiveView live(*this);
  mover_->launched(kernel, blocks, count, all_blocks, live);
  stats_.host_pages = space_.host_pages();
}

bool Pool::unread_launch() {
  std::lock_guard<util::SpinLock> guard(lock_);
  if (mover_ == nullptr) return false;
  driver::ScopedContext scope(api_, context_);
  return mover_->unread_launch();
}

bool Pool::LiveView::find(std::uintptr_t address, EvictionCandidate* out) const {
  const Block* b = pool_.live_.at(address);
  if (b == nullptr || b->address != address || b->segment->reservation->is_chunk()) return false;
  *out = EvictionCandidate{b->address, b->size, b->segment->reservation, b->last_use, b->buffer_id, b->read_on_host};
  return !b->keep_resident && b->pins == 0 && !b->peer_held && b->graph_holds == 0 && b->import_holds == 0;
}

std::size_t Pool::LiveView::reclaim_free_pages(std::size_t pages, std::uintptr_t keep_begin, std::uintptr_t keep_end,
                                               bool wait_for_freed_work) {
  return pool_.reclaim_idle_pages(pages, keep_begin, keep_end, false, kNoPendingWork, /*learn=*/false,
                                  wait_for_freed_work);
}

void Pool::LiveView::candidates(std::vector<EvictionCandidate>* out) const {
  pool_.live_.eviction_candidates(pool_.spared_from_, out);
}

std::size_t Pool::evict_locked(std::size_t pages, std::uintptr_t keep_begin, std::uintptr_t keep_end) {
  if (mover_ == nullptr || pages == 0) return 0;
  LiveView(*this).candidates(&eviction_scratch_);
  if (eviction_scratch_.empty()) return 0;
  return mover_->evict(eviction_scratch_, pages, keep_begin, keep_end);
}

std::size_t Pool::evictable_device_pages() {
  LiveView(*this).candidates(&eviction_scratch_);
  std::size_t pages = 0;
  for (const EvictionCandidate& c : eviction_scratch_) {
    const auto [first, end] = c.reservation->whole_pages(c.address, c.size);
    for (std::size_t p = first; p < end; ++p) pages += c.reservation->page(p).residency == space::Residency::device;
  }
  return pages;
}

util::Status Pool::advise(std::uintptr_t address, std::size_t bytes, Advice advice) {
  std::lock_guard<util::SpinLock> guard(lock_);
  Block* block = live_.at(address);
  if (block == nullptr) return {util::Error::invalid_value, "pointer is not inside a live tidepool allocation"};
  const std::uintptr_t end = bytes > UINTPTR_MAX - address ? UINTPTR_MAX : address + std::max<std::size_t>(bytes, 1);
  util::Status result;
  driver::ScopedContext scope(api_, context_);
  for (Block* b = block; b != nullptr && b->address < end; b = b->next) {
    if (b->is_free || b->requested == 0) continue;
    switch (advice) {
      case Advice::wont_need:
        b->last_use = 0;
        b->keep_resident = false;
        break;
      case Advice::keep_resident: b->keep_resident = true; [[fallthrough]];
      case Advice::will_need:
        live_.mark_used(b);
        if (mover_ != nullptr && space_.host_pages() > 0) {
          if (auto s = bring_back_locked(*b, b->address, b->size, kNoPendingWork, 0); !s && result.ok()) {
            result = s;
          }
        }
        break;
    }
  }
  return result;
}

void Pool::outside_bytes_grew() {
  // The budget again, with the pool's share of it smaller now: what the
  // pool holds beyond goes as a lowered budget's would.
  if (space_.device_bytes() > space_.pool_limit()) (void)set_device_limit(space_.device_limit());
}

util::Status Pool::set_peer_access(int device, bool enabled) {
  std::lock_guard<util::SpinLock> guard(lock_);
  return space_.set_peer_access(device, enabled);
}

util::Status Pool::set_device_limit(std::size_t bytes) {
  std::lock_guard<util::SpinLock> guard(lock_);
  const std::size_t page = space_.page_size();
  // Memory held outside the pool counts against the new budget too.
  const std::size_t outside = space_.device_limit() - space_.pool_limit();
  const std::size_t share = bytes > outside ? bytes - outside : 0;
  const auto pages_over = [&] {
    const std::size_t held = space_.device_bytes();
    return held > share ? util::round_up(held - share, page) / page : 0;
  };
  if (pages_over() > 0) {
    // What is held and in use nowhere goes first, then free blocks' pages
    // (cudaFree frees rejoin first, waiting for their fences: this is an
    // explicit call, not the hot path), then, with eviction, pages of live
    // blocks move to the host. Nothing lost on any path: a page that cannot
    // go stays where it is with its bytes.
    driver::ScopedContext scope(api_, context_);
    space_.release_spares(pages_over() * page);
    if (pages_over() > 0) {
      promote_deferred(DeferredFrees::Wait::everything);
      if (space_.uses_vmm()) {
        reclaim_idle_pages(pages_over(), 0, 0, true, kNoPendingWork, /*learn=*/false);
      } else if (synchronize_if_needed()) {
        trim_chunks();
      }
      space_.release_spares(pages_over() * page);
    }
    // Live pages move only when enough of them can: a budget that would be
    // refused anyway leaves the live blocks where they are.
    if (pages_over() > 0 && mover_ != nullptr && evictable_device_pages() >= pages_over()) {
      evict_locked(pages_over(), 0, 0);
      space_.release_spares(pages_over() * page);
      mover_->collect_released_host_pages();
    }
    stats_.host_pages = space_.host_pages();
  }
  if (pages_over() > 0) {
    return {util::Error::out_of_memory,
            mover_ == nullptr
                ? "live blocks hold more than that on the device and eviction is off; the old budget stays"
                : "live blocks hold more than that on the device, more than eviction could move; the "
                  "old budget stays"};
  }
  space_.set_device_limit(bytes);
  return util::Status::success();
}

}  // namespace tidepool::pool
