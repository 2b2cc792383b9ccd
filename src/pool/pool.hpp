// Pool: device memory for one device, as a composition of parts that each
// own their state:
//   Segments   the VA reservations blocks are carved from (segments.hpp)
//   Arena      small and large requests' free blocks: carving, merging (arena.hpp)
//   LiveSet    blocks handed out: lookups, buffer ids, the use clock (live_set.hpp)
//   Stitcher   idle pages taken from elsewhere to back a range (stitcher.hpp)
//   DeferredFrees, order::StreamFences  when freed memory may be reused
// The pool itself is the ladder that climbs through them (pool.cpp): place a
// request (a placement policy chooses, the arena carves, the space backs the
// pages beneath), and when that fails, promote deferred frees, grow, stitch,
// and, with a PageMover set, evict live blocks' pages to the host.
//
// Reuse is never on a guess:
//  - cudaFree semantics (deallocate with ordered=false): DeferredFrees holds
//    the block. Under a complete stream registry a batch goes back behind a
//    device barrier (order::StreamRegistry::device_barrier), with no host
//    wait; otherwise once a fence over every stream of the context has
//    finished (order/free_fences.hpp).
//  - Stream order (ordered=true on stream s): reusable on s at once; another
//    stream first waits on an event recorded on s after the free (no host
//    wait); a cudaMalloc-style request takes it behind a device barrier, or,
//    where none can be made or would not order it, waits on the host. A
//    block freed before the newest device barrier needs none of these
//    (stream_fences.cpp).
// A fence that fails falls back to a context synchronisation, never during a
// capture; when that is impossible the block stays out of circulation.
//
// Freed memory is reused before new memory is created: a range over unmapped
// pages first takes the deferred frees back, then idle pages from elsewhere
// (the Stitcher), and creates pages only for the rest, so a training loop
// settles into a layout with no VMM calls. Out of budget, it waits for
// outstanding fences, stitches with a context synchronisation if it must,
// evicts if it may, and fails with out_of_memory leaving the pool usable.
//
// Stream handles are checked with the driver the first time the pool meets
// them, never on a cached allocation; a bogus handle is invalid_handle and
// changes nothing. Blocks still pending on a destroyed stream join the
// deferred frees (stream_destroyed).
//
// Thread-safety: one lock (`lock_`) protects all state below, held for the
// whole of each call, slow-path driver calls included. Only the
// order::StreamRegistry's locks are ever taken inside it.
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "driver/driver.hpp"
#include "order/order.hpp"
#include "pool/arena.hpp"
#include "pool/block.hpp"
#include "pool/block_store.hpp"
#include "pool/deferred_frees.hpp"
#include "pool/free_index.hpp"
#include "pool/live_set.hpp"
#include "pool/owner_bytes.hpp"
#include "pool/page_mover.hpp"
#include "pool/placement/policy.hpp"
#include "pool/segments.hpp"
#include "pool/size_classes.hpp"
#include "pool/stitcher.hpp"
#include "space/space.hpp"
#include "util/util.hpp"

namespace tidepool::pool {

struct PoolOptions {
  std::string policy = "best_fit";
  std::size_t small_size = 128 * util::KiB;     // requests up to this go to the small arena
  std::size_t small_alignment = 512;            // small requests round to this
  std::size_t large_alignment = 4 * util::KiB;  // large requests round to this: no slivers
  std::size_t segment_bytes = 0;                // VA per segment; 0: twice the device limit
  bool stitch_before_grow = true;               // reuse idle pages before creating new ones
  // Pages stitching took away and then needed again teach the pool to hold
  // more rather than move them every step, up to this much over the peak
  // live bytes (see try_place). TIDEPOOL_CONF's hold_slack.
  std::size_t hold_slack_percent = 3;
  // cudaFree frees go back behind a device barrier rather than after a host
  // wait (see the rules above). TIDEPOOL_CONF's free_barrier.
  bool free_barrier = true;
  // Out of room under eviction while other threads' submissions pin live
  // blocks (a synchronous copy holds its pin until the device has done
  // it): how long an allocation waits for those pins to go before failing.
  std::uint32_t pin_wait_ms = 1000;
};

struct PoolStats {
  std::uint64_t allocations = 0;
  std::uint64_t frees = 0;
  std::uint64_t live_bytes = 0;  // requested bytes in live blocks
  std::uint64_t peak_live_bytes = 0;
  std::uint64_t handed_out_bytes = 0;  // block bytes in live blocks
  std::uint64_t reserved_bytes = 0;    // physical device bytes held
  std::uint64_t peak_reserved_bytes = 0;
  std::uint64_t spare_bytes = 0;         // physical bytes held but unmapped
  std::uint64_t free_bytes = 0;          // reserved bytes not under live blocks
  std::uint64_t largest_free_block = 0;  // largest allocation servable without new memory
  std::uint64_t deferred_bytes = 0;      // freed, waiting for their fence
  std::uint64_t ooms = 0;
  std::uint64_t maps = 0;
  std::uint64_t unmaps = 0;
  std::uint64_t parked_reuses = 0;  // pages moved back to a place still mapped for them: no driver call
  std::uint64_t access_grants = 0;  // cuMemSetAccess calls, one per run of pages mapped together
  std::uint64_t page_creates = 0;   // physical pages (without VMM: chunks) created on the device
  std::uint64_t page_releases = 0;  // physical pages (chunks) given back to the driver
  std::uint64_t trims = 0;
  std::uint64_t cross_stream_waits = 0;
  std::uint64_t device_barriers = 0;  // cudaFree batches put back behind a barrier on the device
  // Barriers (cudaFree batches, stitching, handouts) made by the legacy stream's order,
  // with no driver call: all work so far was on it
  // (order::StreamRegistry::legacy_only).
  std::uint64_t legacy_order_barriers = 0;
  std::uint64_t stitching_barriers = 0;  // barriers made so that stitching need not wait for a stream
  // Of the device, stitching and handout barriers, those the registry made
  // without queuing anything: the newest one's event still covered all
  // work (order::StreamRegistry::BarrierKind::standing).
  std::uint64_t standing_barriers = 0;
  // Barriers made so that a cudaMalloc-style request could take a block
  // freed in stream order while its stream's work was still queued.
  std::uint64_t handout_barriers = 0;
  // Host waits (on an IPC open worker) for work queued before a
  // block another process maps came to its owner (hold_for_import).
  std::uint64_t import_waits = 0;
  // Allocations that found no room but in blocks other threads' submissions
  // pinned, and waited for those pins to go (PoolOptions::pin_wait_ms).
  std::uint64_t pin_waits = 0;
  // Host waits for work still reading a page's old place before a range there could be mapped.
  std::uint64_t pending_page_waits = 0;
  // Requests placed on a backed block instead, rather than wait for that.
  std::uint64_t pending_page_detours = 0;
  std::uint64_t host_pages = 0;  // pool pages backed by host memory now (evicted)
  std::uint64_t live_blocks = 0;
  std::uint64_t free_blocks = 0;
  std::uint64_t segments = 0;
  [[nodiscard]] double utilization() const noexcept {
    return peak_reserved_bytes == 0 ? 1.0
                                    : static_cast<double>(peak_live_bytes) / static_cast<double>(peak_reserved_bytes);
  }
  [[nodiscard]] double external_fragmentation() const noexcept {
    return free_bytes == 0
               ? 0.0
               : 1.0 - static_cast<double>(std::min(largest_free_block, free_bytes)) / static_cast<double>(free_bytes);
  }
};

// One block as a report sees it.
struct BlockView {
  std::uintptr_t address;
  std::size_t size;
  std::size_t requested;  // 0 for free blocks
  bool backed;            // every page beneath is mapped
  int arena;
};

class Pool {
 public:
  // `streams`: the process's stream registry (not owned, outlives the pool).
  static util::Result<std::unique_ptr<Pool>> create(const driver::Driver& driver, space::AddressSpace& space,
                                                    CUcontext context, order::StreamRegistry& streams,
                                                    const PoolOptions& options);
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // Returns the device address of a block of at least `size` bytes. `ordered`:
  // the memory is used in stream order on `stream` (cudaMallocAsync); else it
  // is usable by any stream at once (cudaMalloc). Size 0 returns 0.
  // `owner`: the caller's tag for who asked (owner_bytes.hpp); the free
  // counts against the same one.
  util::Result<std::uintptr_t> allocate(std::size_t size, std::uintptr_t stream, bool ordered, std::uint16_t owner = 0);
  // Frees a block this pool returned. `ordered`: stream-ordered on `stream`;
  // else cudaFree semantics. A pointer that is not the start of a live block
  // is invalid_value, a stream the driver does not know invalid_handle; both
  // change nothing. A stream of another device is waited for on the host
  // before the block goes back (rare: the pool cannot fence it), and
  // allocate() on one is other_device: that device's pool serves it.
  util::Status deallocate(std::uintptr_t address, std::uintptr_t stream, bool ordered);
  // `stream` is about to be destroyed: blocks still pending on it wait with
  // the cudaFree frees. `retired`: the registry recorded a retirement for it;
  // without one their fence can only be proven by a context synchronisation.
  void stream_destroyed(std::uintptr_t stream, bool retired);

  // The live block starting at `address`, if any: its size as requested.
  [[nodiscard]] bool owns(std::uintptr_t address) const;
  [[nodiscard]] std::size_t requested_size(std::uintptr_t address) const;
  // The live block containing `address` (interior pointers up to the size
  // requested), for cuMemGetAddressRange and pointer attributes: its base,
  // requested size and buffer id (unique for the life of the process). False
  // when no live allocation covers the address.
  bool find_containing(std::uintptr_t address, std::uintptr_t* base, std::size_t* size,
                       std::uint64_t* buffer_id = nullptr) const;
  // The largest single request the pool could serve now without exceeding
  // the budget: cached pages it can reuse or re-stitch plus the budget left,
  // the latter capped by `driver_free` (what the driver says is free).
  [[nodiscard]] std::size_t servable_bytes(std::size_t driver_free) const;
  // Whether `address` lies inside any segment of this pool.
  [[nodiscard]] bool in_segments(std::uintptr_t address) const;

  // Residency (residency/): a mover of pages between device and host. Once
  // set, the pool tells it every block it hands out and takes back, evicts
  // through it when the budget is short (after free memory: deferred frees,
  // stitching), and brings back host pages under a block it hands out.
  // Set once, before the first allocation; the mover outlives the pool.
  void set_page_mover(PageMover* mover);
  // Brings the host-resident pages of the live block containing `address`
  // (within [address, address + bytes)) back to the device, evicting others
  // if the budget is short, ordered before work queued later on any stream.
  // invalid_value when no live block holds `address`.
  util::Status make_resident(std::uintptr_t address, std::size_t bytes, std::uintptr_t stream);
  // Use hints for the live blocks overlapping [address, address + bytes):
  // will_need marks them used now and brings them back; wont_need makes
  // them the first to evict; keep_resident brings them back and exempts
  // them from eviction until freed. invalid_value when no live block holds
  // `address`.
  enum class Advice { will_need, wont_need, keep_resident };
  // For launch scans, without the lock: whether `address` lies within the
  // span of this pool's segments (a pre-check; use_for_launch decides).
  [[nodiscard]] bool may_own(std::uintptr_t address) const noexcept { return segments_.may_contain(address); }
  // [begin, end) of may_own as of now (the span only grows).
  [[nodiscard]] std::pair<std::uintptr_t, std::uintptr_t> span() const noexcept { return segments_.span(); }
  // A submission (a kernel launch, a copy, a set) about to be queued on
  // `stream` names `address`: the live block holding it is marked used and
  // pinned (once per submission: `pins` lists them), and `used` receives
  // it; the caller releases the pins with release_pins() once the driver
  // call has returned. Its pages on the host come back now
  // (bring_back_now), before work queued later on any stream; with the
  // launch's other blocks (bring_back_later: the caller calls
  // bring_back_for_launch); or stay there and are read there (read_there).
  // bring_back_for_peer: the submission is another device's, which no gate
  // of this pool orders: the pages come back now, the host waits for their
  // copies (and, at the block's first such submission, for any copy still
  // bringing pages back), and the block is never evicted again
  // (Block::peer_held).
  // `host_pages` receives how many of its pages were on the host,
  // `still_on_host` how many stayed there (no room, another submission's
  // pin, or not brought back yet). False when no live block holds
  // `address`: nothing is pinned.
  enum class OnHost { bring_back_now, bring_back_later, read_there, bring_back_for_peer };
  bool use_for_submission(std::uintptr_t address, std::uintptr_t stream, OnHost on_host, Pins* pins,
                          LaunchedBlock* used, std::size_t* host_pages, std::size_t* still_on_host) {
    SubmittedWord word{};
    word.address = address;
    const bool found = use_for_submission(std::span<SubmittedWord>(&word, 1), stream, on_host, pins) == 1;
    *used = word.block;
    *host_pages = word.host_pages;
    *still_on_host = word.still_on_host;
    return found;
  }
  // The same for every word of `words` under one hold of the pool's lock (a
  // launch naming several blocks pays one); each word's `found` says whether
  // a live block held it. Returns how many did.
  std::size_t use_for_submission(std::span<SubmittedWord> words, std::uintptr_t stream, OnHost on_host, Pins* pins);
  // The submission that took `pins` is queued: from here its work is
  // ordered in its stream, where gates and barriers see it. Pins of another
  // pool's blocks, or of blocks freed since, are skipped.
  void release_pins(const Pins& pins);
  // An instantiated graph's kernel names `address`: the live block holding
  // it is held on the device (never evicted) until release_graph_holds(),
  // and its host pages come back now, ordered before work queued later on
  // any stream (as far as the budget lets them: what stays is read on the
  // host). `held` receives the block. False when no live block holds it.
  bool hold_for_graph(std::uintptr_t address, std::uintptr_t stream, LaunchedBlock* held);
  // The graph is destroyed: its holds end (blocks freed since are skipped).
  void release_graph_holds(const LaunchedBlock* held, std::size_t count);
  // IPC: another process maps the live block starting at `address` (with
  // `buffer_id`, so a block freed and made again is never taken for it).
  // First the host waits, until `wait_until` at most, for the work queued
  // so far, which holds any work queued before the block came to its owner
  // (a block handed out behind a barrier is ordered after that work on this
  // context's streams only). Its pages come back to the device and stay
  // there while any such hold lasts; a free of it meanwhile succeeds but
  // takes effect only when the last hold ends, so the other process never
  // sees its bytes reused.
  // `pages` receives what the other process maps (space::AddressSpace::share).
  // invalid_value when the block is gone or freed; out_of_memory when its
  // pages cannot all come back; driver_error when the wait cannot be made
  // by `wait_until` (a capture in progress, work that does not finish) or a
  // call failed. Nothing is held then.
  util::Status hold_for_import(std::uintptr_t address, std::uint64_t buffer_id, space::AddressSpace::SharedPages* pages,
                               std::chrono::steady_clock::time_point wait_until);
  // One such hold ends; true when that was the last and the block, freed
  // meanwhile, went back to the pool (with cudaFree semantics).
  bool release_import_hold(std::uintptr_t address, std::uint64_t buffer_id);
  // The host pages of a launch's blocks (those use_for_launch found and left
  // on the host) come back before work queued later, as far as the budget
  // lets them. Room is never made by evicting a block used at or after
  // `spared_from` on the pool's use clock (the first LaunchedBlock::used_at
  // of the launch): the launch's own blocks, however many, and any another
  // thread is using now. So a launch whose blocks do not all fit reads the
  // rest on the host rather than moving its own blocks back and forth.
  // Returns the pages of these blocks on the host before and after.
  struct LaunchPages {
    std::size_t before = 0;
    std::size_t after = 0;
  };
  // `pins`: the launch's own (a block it did not pin is brought back only
  // if no one else pins it).
  LaunchPages bring_back_for_launch(const LaunchedBlock* blocks, std::size_t count, std::uintptr_t stream,
                                    std::uint64_t spared_from, const Pins& pins);
  // A scanned launch of `kernel` named `blocks` (those use_for_launch found):
  // the mover learns the program's order from it (prefetch:learn).
  void launched(std::uintptr_t kernel, const LaunchedBlock* blocks, std::size_t count, bool all_blocks);
  // A launch whose parameters could not be read: see
  // PageMover::unread_launch.
  bool unread_launch();
  util::Status advise(std::uintptr_t address, std::size_t bytes, Advice advice);

  // Waits for deferred frees, unmaps every idle page and releases every spare
  // page to the driver. Returns the bytes released.
  std::size_t trim();
  // A new device budget. Raised, it holds at once. Lowered below what the
  // pool holds, the pool first gives back what it can at once: spare pages,
  // free blocks' pages (cudaFree frees waited for), and with eviction live
  // blocks' pages moved to the host, only when enough of them can move. If
  // it still holds more than `bytes` less what the process holds outside the
  // pool (AddressSpace::pool_limit), the budget is refused (out_of_memory,
  // the old budget stays), so the pool never holds more than the budget in
  // force. A refused budget may still have given back cached pages, but it
  // moves no live page unless the host cache fills midway (those pages stay
  // on the host, intact). The caller checks `bytes` against the device
  // (runtime::budget_problem).
  util::Status set_device_limit(std::size_t bytes);
  // The bytes the process holds outside the pool grew: what the pool holds
  // beyond what the budget leaves it (AddressSpace::pool_limit) goes as
  // under a lowered budget (set_device_limit): spares, free blocks' pages,
  // with eviction live pages. What cannot go (live blocks without eviction)
  // stays, and the budget holds again as they are freed.
  void outside_bytes_grew();
  // Peer access to every page of the pool (space::AddressSpace::set_peer_access).
  util::Status set_peer_access(int device, bool enabled);
  // `with_fragmentation`: also compute free_bytes and largest_free_block,
  // which walks every free block (O(n)); the counters alone are O(1).
  [[nodiscard]] PoolStats stats(bool with_fragmentation = true) const;
  // stats() and size_classes() at once, for a caller that must never wait
  // forever (the exit report): false, nothing read, when the pool's lock is
  // still held at `deadline`. A signal handler that calls exit() while the
  // thread it interrupted is inside a pool call finds the lock held for good.
  bool try_stats(std::chrono::steady_clock::time_point deadline, PoolStats* stats, SizeHistogram* classes,
                 OwnerBytes* owners) const;
  // Allocations, frees and failures by requested size (the report's size_classes).
  [[nodiscard]] SizeHistogram size_classes() const;
  // Bytes by owner tag (the report's owners).
  [[nodiscard]] OwnerBytes owner_bytes() const;
  [[nodiscard]] std::string_view policy_name() const;
  [[nodiscard]] const PoolOptions& options() const noexcept { return options_; }
  // Every block, free and live, in address order per segment.
  [[nodiscard]] std::vector<BlockView> snapshot() const;

 private:
  Pool(const driver::Driver& driver, space::AddressSpace& space, CUcontext context, order::StreamRegistry& streams,
       const PoolOptions& options, std::unique_ptr<PlacementPolicy> policy);

  Block* allocate_locked(int arena_id, std::size_t rounded, std::uintptr_t stream, bool ordered, util::Status* error);
  // allocate_locked again each time a pin goes (or a block is freed), and
  // once more when pin_wait_ms has passed, while the room lacking is held
  // by pinned blocks; `guard` is let go meanwhile.
  Block* allocate_after_pins(std::unique_lock<util::SpinLock>& guard, int arena_id, std::size_t rounded,
                             std::uintptr_t stream, bool ordered, util::Status* error);
  Block* climb_ladder(int arena_id, std::size_t rounded, std::uintptr_t stream, bool ordered, util::Status* error);
  // Why a placement attempt found no block, for the ladder's next rung.
  // try_place writes all of it whenever it fails (its status goes to
  // `error`) and none of it when it succeeds: the cached path pays nothing.
  struct Miss {
    bool no_fit;        // no free block was large enough
    bool fence_failed;  // the chosen block's pending work could not be fenced (set aside in unsafe_)
    // Backing failed for lack of pages: how many more the chosen range
    // needs, and the range, which reclaiming must spare.
    std::size_t pages_short;
    std::uintptr_t keep_begin;
    std::uintptr_t keep_end;
  };
  // How many chosen blocks one allocation may set aside (unsafe_).
  static constexpr std::size_t kMaxSetAside = 8;
  // The ladder's rungs, after the first placement missed as `last` says:
  // out of line, the cached path does not pay their frame.
  [[gnu::noinline]] Block* climb_rungs(Arena& arena, std::size_t rounded, std::uintptr_t stream, bool ordered,
                                       util::Status* error, Miss last);
  // try_place, again while the chosen block's pending work cannot be fenced.
  Block* place(Arena& arena, std::size_t rounded, std::uintptr_t stream, bool ordered, util::Status* error, Miss* miss);
  // `promoted`: cudaFree frees were just promoted for this request; they are
  // not promoted again.
  Block* try_place(Arena& arena, std::size_t rounded, std::uintptr_t stream, bool ordered, util::Status* error,
                   Miss* miss, bool promoted = false);
  // try_place's path for a chosen range with `missing` pages to back from
  // `begin`: cudaFree frees promoted first, parked mappings in the way
  // dealt with, stitching, then backing.
  [[gnu::noinline]] Block* place_unbacked(Arena& arena, const Request& request, Block* chosen, std::uintptr_t begin,
                                          std::size_t missing, bool ordered, util::Status* error, Miss* miss,
                                          bool promoted);
  // `chosen` carved for `request` and made safe for its stream, or set aside.
  [[gnu::always_inline]] Block* carve_placed(Arena& arena, Block* chosen, const Request& request, bool ordered,
                                             util::Status* error, Miss* miss);
  util::Status add_segment(Arena& arena, std::size_t min_bytes);
  util::Status make_stream_safe(Block* block, std::uintptr_t stream, bool ordered);
  // A live block (out of live_) goes back: stream-ordered on `key`, after a
  // host wait (`settled`), or with cudaFree semantics.
  void take_back_locked(Block* block, std::uintptr_t key, bool ordered, bool settled);
  // A context synchronisation (never during a capture): every free so far is safe.
  bool synchronize_context() { return fences_.synchronize(deferred_.capture_in_progress()); }
  // hold_for_import's wait for the work queued so far, on every stream of
  // the context and the page mover's own: events polled outside the lock
  // (`guard`, held on entry and on return) until `wait_until`, or, where
  // events cannot answer, a context synchronisation. The pool's context is
  // current.
  util::Status wait_for_queued_work(std::unique_lock<util::SpinLock>& guard,
                                    std::chrono::steady_clock::time_point wait_until);
  [[nodiscard]] PoolStats stats_locked(bool with_fragmentation) const;

  bool promote_deferred(DeferredFrees::Wait wait);
  // Every deferred block back to the index behind a device barrier, no host
  // wait; false (nothing moved) when the barrier cannot be made.
  bool promote_deferred_behind_barrier();
  // Every deferred block back to the index, freed before the device barrier
  // of `epoch` (kAfterBarrier).
  void release_deferred_behind(std::uint64_t epoch);
  // The barrier epoch before which freed blocks give pages to stitching while
  // their work may still run (stitcher.hpp); 0: none. Only work queued after
  // the barrier is ordered after theirs, and residency's copies to and from
  // the host cache (some on no gate, once the step is learned) need not be:
  // with a page mover, no such pages.
  [[nodiscard]] std::uint64_t pages_with_work_pending_from() const noexcept {
    return mover_ == nullptr ? barrier_epoch_ : 0;
  }
  // A device barrier for stitching, so that a stream-ordered request takes
  // pages from under blocks freed on its own stream whose work is still
  // queued, instead of the host waiting for it (stitcher.hpp). Its epoch,
  // or 0 where none can be made. Deferred frees stay deferred: stitching is
  // walking the index. Not with a page mover, nor with `free_barrier:off`.
  std::uint64_t barrier_for_stitching();
  // A device barrier made on request: its epoch, now barrier_epoch_, counted
  // in `queued_count` when queued (else as made in the legacy stream's
  // order); 0 where none can be made.
  std::uint64_t barrier_on_request(std::uint64_t PoolStats::*queued_count);
  // Counts a barrier made whole: in `queued_count` when queued or standing
  // on the last one queued (standing_barriers too), else as made in the
  // legacy stream's order.
  void count_barrier(order::StreamRegistry::BarrierKind made, std::uint64_t PoolStats::*queued_count);
  // A device barrier so that a cudaMalloc-style request takes a block freed
  // in stream order whose stream's work is still queued: the request names
  // no stream to order after it, and without one the host waits. False
  // where none can be made (a capture, an incomplete registry, more streams
  // than a barrier covers, a failed driver call).
  bool barrier_for_handout();
  // Whether cudaFree-style frees go back behind a device barrier, with no
  // fence: only while one context can reach the pool's memory. A barrier
  // orders its own context's streams alone, and a block handed out behind
  // one may be used from another context (a peer device, a copy on another
  // device's stream) while the work before its free still runs.
  [[nodiscard]] bool frees_behind_barrier() const noexcept { return options_.free_barrier && registry_.one_context(); }
  // What a stream-ordered request's stitching may ask for (null: none).
  [[nodiscard]] BarrierMaker* stitching_barriers(bool ordered) noexcept {
    return ordered && mover_ == nullptr && options_.free_barrier ? &stitch_barrier_ : nullptr;
  }
  // Whether a cudaFree-style free goes back to the index at once: all work
  // the process queued is on the legacy stream, and this pool's context has
  // a barrier made in that stream's order standing for it
  // (legacy_order_marked_), so the stream's order already puts the block's
  // old work before a new owner's. No batch, no barrier, no driver call.
  // Not with a page mover, whose barriers are recorded (barrier_fences_).
  [[nodiscard]] bool frees_in_legacy_order() const noexcept {
    return legacy_order_marked_ && mover_ == nullptr && !barrier_failed_ && deferred_.empty() && registry_.complete() &&
           registry_.legacy_only();
  }
  // promote_deferred_behind_barrier(), else wait for every fence.
  bool promote_all_deferred();
  // Whether enough is deferred that it should rejoin the index before the
  // next placement rather than when a request misses.
  [[nodiscard]] bool deferred_worth_promoting() const;
  // Stitcher::reclaim. `may_synchronize`: may wait for the whole context to
  // free pages under stream-ordered frees; else those blocks are taken once
  // their stream is past them or behind a barrier (`barriers`), waiting
  // only on `request_stream` where none can be made.
  // `barriers`: as for Stitcher::reclaim (only without `may_synchronize`).
  std::size_t reclaim_idle_pages(std::size_t pages_needed, std::uintptr_t keep_begin, std::uintptr_t keep_end,
                                 bool may_synchronize, std::uintptr_t request_stream, bool learn,
                                 bool wait_for_barrier = false, BarrierMaker* barriers = nullptr);
  // Host pages under [begin, begin + length) back to the device, making room
  // first (stitching, then eviction elsewhere). Best effort: pages that
  // cannot come back stay on the host, where they are still correct.
  // Refused (the pages stay) while submissions other than the caller's
  // `own_pins` pin the block. An end page shared with a live neighbour moves
  // for that neighbour too: it stays while the neighbour holds its pages in
  // place (shares_a_held_page; `caller_pins`: the caller's submission's,
  // which do not).
  util::Status bring_back_locked(Block& block, std::uintptr_t begin, std::size_t length, std::uintptr_t stream,
                                 std::uint32_t own_pins, const Pins* caller_pins = nullptr);
  // Whether page `page` of `block`'s reservation also lies under a live
  // block other than `block` whose pages must stay where they are for a
  // gated move: one a submission other than the caller's (`caller_pins`)
  // has pinned, or one another device's streams use, which no gate of this
  // pool orders. (A graph's launches are pinned and run on this device's
  // streams; a block another process maps has every page on the device.)
  static bool shares_a_held_page(const Block& block, const space::Reservation& r, std::size_t page,
                                 const Pins* caller_pins);
  static std::size_t host_pages_in(const space::Reservation& r, std::uintptr_t begin, std::size_t length);
  // use_for_submission's work for one word, under the lock.
  bool use_for_submission_locked(SubmittedWord* word, std::uintptr_t stream, OnHost on_host, Pins* pins);
  // Moves live blocks' pages to the host until `pages` device pages are
  // spare (sparing [keep_begin, keep_end)); returns how many it freed.
  std::size_t evict_locked(std::size_t pages, std::uintptr_t keep_begin, std::uintptr_t keep_end);
  // Device pages eviction could move now: whole pages of live blocks on the
  // device, keep-resident blocks aside (the host cache's bound not counted).
  std::size_t evictable_device_pages();
  // Whether no stream-ordered free can still be in use (synchronising if needed).
  bool synchronize_if_needed();
  std::size_t trim_chunks();
  Arena& arena_of(const Block* block) { return arenas_[block->segment->arena]; }

  const driver::Driver& driver_;
  const driver::Api& api_;
  space::AddressSpace& space_;
  CUcontext context_;
  PoolOptions options_;
  std::unique_ptr<PlacementPolicy> policy_;
  order::StreamRegistry& registry_;
  PageMover* mover_ = nullptr;
  bool mover_orders_uses_ = false;       // mover_->orders_uses(), asked once
  std::vector<CUstream> mover_streams_;  // mover_->own_streams(), asked once
  // What the mover may ask about live blocks from inside a call.
  class LiveView final : public LiveBlocks {
   public:
    explicit LiveView(Pool& pool) : pool_(pool) {}
    bool find(std::uintptr_t address, EvictionCandidate* out) const override;
    void candidates(std::vector<EvictionCandidate>* out) const override;
    std::size_t reclaim_free_pages(std::size_t pages, std::uintptr_t keep_begin, std::uintptr_t keep_end,
                                   bool wait_for_freed_work) override;

   private:
    Pool& pool_;
  };
  // The space asks it before unmapping a page parked with work pending
  // (stitching takes pages behind a device barrier without waiting): it
  // queries the fence, never waits.
  class FenceCheck final : public space::UnmapCheck {
   public:
    explicit FenceCheck(order::StreamFences& fences) : fences_(fences) {}
    bool finished(const space::PendingUse& use) override {
      return fences_.query(use.key, use.epoch, kNoPendingWork, /*wait_for_barrier=*/false);
    }

   private:
    order::StreamFences& fences_;
  };
  class StitchBarrier final : public BarrierMaker {
   public:
    explicit StitchBarrier(Pool& pool) : pool_(pool) {}
    std::uint64_t make() override { return pool_.barrier_for_stitching(); }

   private:
    Pool& pool_;
  };
  // Where a request carved from `chosen` begins (the policy picks the end).
  [[nodiscard]] std::uintptr_t carve_begin(const Block& chosen, const Request& request) const;
  // A free block other than `chosen` of one of the next sizes up whose range
  // for `request` is wholly backed, or null: where a range may not wait for
  // the pages in its way (a capture), the request goes there instead.
  Block* backed_fit(Arena& arena, const Request& request, const Block* chosen);
  // Waits for the work still using the parked mappings in_the_way_ lists
  // (space::AddressSpace::pending_in_the_way): what a range needs before its
  // pages can be mapped, and no more. False when neither a wait nor a
  // context synchronisation proves it done, or while a capture runs.
  bool wait_for_pages_in_the_way();
  std::vector<EvictionCandidate> eviction_scratch_;  // evict_locked's list
  // While bring_back_for_launch makes room: blocks used at or after this
  // point of the live set's use clock are not evicted (0: none spared).
  std::uint64_t spared_from_ = 0;

  mutable util::SpinLock lock_;
  // Bumped, under lock_, each time a block's last pin goes or a block is
  // freed; read without it by allocate_after_pins while it waits.
  std::atomic<std::uint64_t> room_changes_{0};
  void room_changed() noexcept {  // under lock_, the only writer: a plain store
    room_changes_.store(room_changes_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }
  order::EventCache events_;
  order::BarrierFences barrier_fences_{api_, events_};  // when the work before recent device barriers finished
  DeferredFrees deferred_;                              // cudaFree-semantics frees awaiting a fence
  order::StreamFences fences_{api_, context_, registry_, events_, barrier_fences_};  // stream-ordered frees
  BlockStore blocks_;
  Segments segments_;
  Arena arenas_[2]{{0, blocks_, *policy_, fences_}, {1, blocks_, *policy_, fences_}};  // small, large requests
  LiveSet live_{segments_};
  Stitcher stitcher_{space_, segments_, arenas_, fences_, options_.hold_slack_percent};
  FenceCheck fence_check_{fences_};
  StitchBarrier stitch_barrier_{*this};
  std::vector<space::PendingUse> in_the_way_;  // wait_for_pages_in_the_way's scratch
  std::uint64_t sequence_ = 0;
  bool barrier_failed_ = false;  // the last device barrier could not be made
  // A barrier of this pool was made in the legacy stream's order; it stands
  // until legacy_only ends (order::StreamRegistry, which clears its in-order
  // mark only when ending legacy_only).
  bool legacy_order_marked_ = false;
  std::uint64_t barrier_epoch_ = 0;  // fences_'s epoch of the newest device barrier (0: none)
  std::vector<Block*> unsafe_;       // set aside during one allocation
  PoolStats stats_;
  SizeHistogram size_classes_;
  OwnerBytes owners_;
};

}  // namespace tidepool::pool
