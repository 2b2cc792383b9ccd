// PageMover: what the pool asks of a layer that can move the pages of live
// blocks to the host and back. The residency layer implements it; the pool
// knows only this interface, so it stays below residency in the layer order.
//
// Every call is made with the pool's lock held: the mover may use the
// AddressSpace (which that lock serialises) and must never call back into
// the pool. The pool keeps the use bookkeeping (a use clock per live block,
// keep-resident marks) and hands the mover its candidates, so the mover's
// view of what is live is always the pool's.
//
// When a page may move: the residency rule. A page of a live block changes
// residency (is unmapped and mapped again, device to host or back) only
// under the pool's lock, and only when both hold:
//
//  1. No submission that named the block is on its way to the driver. A
//     submission (a kernel launch, a copy, a set, by any route the preload
//     hooks) pins the blocks it names, under the pool's lock, before the
//     driver call, and releases them once the call has returned (Pins,
//     Pool::use_for_submission). So every submission naming the block is
//     either in a stream before the move is decided, where (2) orders it, or
//     scanned after the move, and finds the page where the move left it.
//     A block pinned by others is not a candidate, and is not brought back
//     for anyone else: its pages stay where they are, and every access still
//     reads the right bytes there. A page two blocks share moves for both:
//     the rule holds for each (Pool::shares_a_held_page).
//  2. All work queued that may touch the page runs before the remap, and all
//     work queued later runs after it. A gated move (transit.hpp) drains
//     every stream of the context first and holds every stream's later work
//     behind a host-written flag; by (1) nothing that names the block can be
//     queued in the window while the gate's calls are made. A tracked move
//     (prefetch:learn, learned_prefetch.hpp) trusts the scan instead: a copy
//     out is queued behind a device barrier and committed only if nothing
//     named the block since; a block comes back without a gate only if
//     nothing named it while its pages were on the host (`read_on_host`),
//     and the next submission naming it waits for the copy in (before_use).
//
// Graph launches pass no launch hook: the blocks an instantiated graph's
// kernels name are held on the device for as long as the graph exists
// (Block::graph_holds), and each launch of it pins them as a launch does.
// Blocks another device's submissions name are held on the device for good
// (Block::peer_held): no gate of this pool orders that device's streams, so
// the first such submission also waits, on the host, for the copies that
// brought the block's pages back (at its allocation, on a hint).
// No move synchronises the context while a capture is in progress, and no
// gate touches a capturing stream: the pages stay where they are instead.
// Outside the rule: kernels that reach pool memory through pointers held in
// device memory rather than in their parameters (ordered by gates only, and
// not in a gate's window); kernels of child graphs, and graphs' memcpy and
// memset nodes (not scanned); a submission naming more than Pins::kMax
// blocks (the rest are not pinned).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "space/space.hpp"
#include "util/util.hpp"

namespace tidepool::pool {

// A live block that may give up its device pages, as the pool sees it.
struct EvictionCandidate {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  space::Reservation* reservation = nullptr;
  std::uint64_t last_use = 0;   // the pool's use clock: allocation, hints, prefetches; larger is more recent
  std::uint64_t buffer_id = 0;  // unique per allocation
  // Work may be reading its host pages: they come back only through a gate.
  bool read_on_host = false;
};

// A block a kernel launch named in its parameters.
// Trivial on purpose: a launch keeps arrays of them on its stack, and pays
// only for those it fills (`LaunchedBlock b{}` for a zeroed one).
struct LaunchedBlock {
  std::uintptr_t address;
  std::uint64_t buffer_id;
  std::uint64_t used_at;  // the pool's use clock when the launch scan marked it
};

// One word a submission names, and what Pool::use_for_submission found for
// it: the live block holding it, and its pages on the host before and after
// any bring-back.
// Trivial, as LaunchedBlock: the caller sets `address`, the pool the rest
// (`block` only when `found`).
struct SubmittedWord {
  std::uintptr_t address;
  bool found;
  // The submission's first word in `block`: the one that pinned it. Words
  // after it in the same block, and words past Pins::kMax blocks, are not.
  bool pinned_block;
  LaunchedBlock block;
  std::size_t host_pages;
  std::size_t still_on_host;
};

// The blocks one submission (a kernel launch, a copy, a set) pinned while it
// is on its way to the driver (Pool::use_for_submission), released together
// once the driver call has returned (Pool::release_pins). Lives in the
// hook's frame: the array is left uninitialised, only `count` entries are set.
struct Pins {
  // PyTorch's multi_tensor_apply passes up to 110 tensors, and pointers to
  // more chunks' metadata, in one launch.
  static constexpr std::size_t kMax = 256;
  // The block itself, found again without a lookup: a Block's memory lives
  // as long as its pool (BlockStore), and its buffer id tells whether it is
  // still the block pinned.
  struct Pin {
    const void* pool;
    void* block;
    std::uint64_t buffer_id;
  };
  Pin pins[kMax];  // NOLINT(cppcoreguidelines-avoid-c-arrays,modernize-avoid-c-arrays): left uninitialised on purpose
  std::size_t count = 0;
  bool overflow = false;  // more blocks than kMax were named: those beyond are not pinned
  [[nodiscard]] bool holds(std::uint64_t buffer_id) const noexcept {
    for (std::size_t i = 0; i < count; ++i) {
      if (pins[i].buffer_id == buffer_id) return true;
    }
    return false;
  }
};

// The pool's live blocks, as a mover asks about them from inside a call the
// pool made (under its lock).
class LiveBlocks {
 public:
  virtual ~LiveBlocks() = default;
  // The live block at `address` (its start), or false.
  virtual bool find(std::uintptr_t address, EvictionCandidate* out) const = 0;
  // Every live block that may give up device pages (as evict() gets them).
  virtual void candidates(std::vector<EvictionCandidate>* out) const = 0;
  // Unmaps up to `pages` idle pages of free blocks outside [keep_begin,
  // keep_end); returns how many. The device is never waited for, except
  // with `wait_for_freed_work`: then the host may wait for the work queued
  // before the device barrier a freed block came back behind (which may be
  // all work queued until its batch of frees was promoted), never for work
  // queued after that barrier.
  virtual std::size_t reclaim_free_pages(std::size_t pages, std::uintptr_t keep_begin, std::uintptr_t keep_end,
                                         bool wait_for_freed_work) = 0;
};

class PageMover {
 public:
  virtual ~PageMover() = default;
  // Moves pages of `candidates` (live blocks, none marked keep-resident) to
  // the host until at least `pages` device pages are spare, never a page of
  // [keep_begin, keep_end). Returns how many device pages it made spare
  // (fewer when the host cache or the candidates ran out, or a driver call
  // failed; nothing is lost either way).
  virtual std::size_t evict(std::vector<EvictionCandidate>& candidates, std::size_t pages, std::uintptr_t keep_begin,
                            std::uintptr_t keep_end) = 0;
  // Brings the host pages under [address, address + length) of `reservation`
  // back to the device, ordered before any work queued after this call.
  // The caller has made room for them where it could; pages without room
  // stay on the host.
  virtual util::Status bring_back(space::Reservation& reservation, std::uintptr_t address, std::size_t length,
                                  std::uintptr_t stream) = 0;
  // Host pages the space unmapped (a trim, stitching a free range) go back
  // to the cache.
  virtual void collect_released_host_pages() = 0;
  // Compressed eviction: a page may lie on the host compressed, where no
  // access can read it. has_unreadable_pages() says whether any does now;
  // make_readable() then leaves every page under [address, address +
  // length) on the device or on a raw host page. A submission naming a
  // block, a graph holding it and an IPC export of it call it before the
  // access they let through.
  [[nodiscard]] virtual bool has_unreadable_pages() const { return false; }
  virtual void make_readable(space::Reservation& /*reservation*/, std::uintptr_t /*address*/, std::size_t /*length*/) {}

  // Learned prefetch (a mover that keeps a schedule; the defaults ignore it).
  // A scanned launch of `kernel` named `blocks`; `all_blocks` false: it
  // named more than these (the scan keeps a bounded list), so no block may
  // be moved without a gate before the launch is queued.
  virtual void launched(std::uintptr_t /*kernel*/, const LaunchedBlock* /*blocks*/, std::size_t /*count*/,
                        bool /*all_blocks*/, LiveBlocks& /*live*/) {}
  // A launch whose parameters could not be read (its kernel is not
  // described) is about to be queued, or a graph holding such a kernel was
  // instantiated: it may use any block, so every copy still moving a
  // block's pages finishes first, no block moves without a gate from here
  // on, and every compressed page is made readable and compression ends.
  // True the first time (the mover stopped trusting the scan).
  virtual bool unread_launch() { return false; }
  // A launch on `stream` is about to use the block: order it after any copy
  // still bringing the block's pages back. Called only when orders_uses()
  // (asked once, when the mover is set): a launch's words then pay no call.
  virtual void before_use(std::uint64_t /*buffer_id*/, std::uintptr_t /*stream*/) {}
  [[nodiscard]] virtual bool orders_uses() const { return false; }
  // The host waits for every copy still bringing pages back.
  virtual void wait_for_copies_in() {}
  // The streams the mover queues its copies and gates on, which no stream
  // registry lists: a fence of the context's work records on them too.
  [[nodiscard]] virtual std::vector<CUstream> own_streams() const { return {}; }
  // The block is being freed: nothing of it is moved or predicted any more.
  virtual void forget(std::uint64_t /*buffer_id*/) {}
};

}  // namespace tidepool::pool
