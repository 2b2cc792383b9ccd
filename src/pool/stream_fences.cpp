// Stream fences, the blocks' side: when a block freed in stream order may go
// to new work. How far each stream's work is known finished is
// order::StreamFences' (order/stream_fences.hpp); here a block carries the
// key and epoch of its free, and is settled once they are.
//
// Invariant: a free block with stream != kNoPendingWork may have queued work
// on that stream (its key) up to its free_epoch. It goes to work on the same
// stream at once; to another stream only after that stream waits on an event
// recorded after the free (or the event is known finished); to a
// cudaMalloc-style request behind a device barrier made then, or, where none
// can be made, once the event finished on the host. A block freed before the
// newest device barrier, or put back behind one (kAfterBarrier), goes to any
// work at once; the latter's "stream" for settling is the legacy stream,
// which is behind the barrier. A stream's finished_epoch only grows, and only
// from an event that reported CUDA_SUCCESS or a context synchronisation that
// succeeded: a failed call is never read as "finished".
#include <algorithm>
#include <mutex>

#include "order/order.hpp"
#include "pool/pool.hpp"

namespace tidepool::pool {

using order::StreamRegistry;
using order::stream_keys::is_per_thread_key;
using order::stream_keys::stream_key;

bool Pool::promote_deferred_behind_barrier() {
  if (!frees_behind_barrier() || deferred_.empty()) return false;
  // While barriers fail (a capture, too many streams), frees are fenced as
  // they come (deallocate), so that promotions without a wait find them done.
  const StreamRegistry::BarrierKind made = registry_.device_barrier(context_);
  barrier_failed_ = made == StreamRegistry::BarrierKind::failed;
  if (barrier_failed_) return false;
  // The blocks' earlier work may still run; nothing that runs later can
  // overlap it. Unmapping their pages waits for a record on the legacy
  // stream made after this barrier (settle_by_query), or a synchronisation.
  const std::uint64_t epoch = fences_.freed();
  barrier_epoch_ = epoch;
  count_barrier(made, &PoolStats::device_barriers);
  // All work so far is on the legacy stream: nothing was queued.
  if (made == StreamRegistry::BarrierKind::in_order) legacy_order_marked_ = true;
  // Only eviction waits for one barrier's work (a learned bring-back taking
  // pages of blocks freed a launch ago); without it the record would cost
  // every promotion a record and a query for answers nothing asks.
  if (mover_ != nullptr) barrier_fences_.recorded_barrier(epoch);
  release_deferred_behind(epoch);
  return true;
}

void Pool::release_deferred_behind(std::uint64_t epoch) {
  deferred_.release_all([&](Block* b) {
    b->stream = kAfterBarrier;
    b->free_epoch = epoch;
    arena_of(b).release(b);
  });
  stats_.deferred_bytes = deferred_.bytes();
}

std::uint64_t Pool::barrier_on_request(std::uint64_t PoolStats::*queued_count) {
  const StreamRegistry::BarrierKind made = registry_.device_barrier(context_);
  if (made == StreamRegistry::BarrierKind::failed) return 0;
  barrier_epoch_ = fences_.freed();
  count_barrier(made, queued_count);
  return barrier_epoch_;
}

void Pool::count_barrier(StreamRegistry::BarrierKind made, std::uint64_t PoolStats::*queued_count) {
  if (made == StreamRegistry::BarrierKind::in_order) {
    stats_.legacy_order_barriers++;
    return;
  }
  ++(stats_.*queued_count);
  if (made == StreamRegistry::BarrierKind::standing) stats_.standing_barriers++;
}

std::uint64_t Pool::barrier_for_stitching() {
  const std::uint64_t epoch = barrier_on_request(&PoolStats::stitching_barriers);
  if (epoch == 0) return 0;
  // Stitching parks pages behind this barrier, and a request that needs one
  // of their places back asks, often a step later, whether the work before
  // it is done (the space's unmap check, then wait_for_pages_in_the_way). A record behind the barrier
  // answers that; without one, the answer is a record made at the tail of
  // the queue when asked, and the host waits for everything queued since.
  // Stitching barriers are few and off the hot path. (Promotion barriers
  // get a record only with eviction on: promote_deferred_behind_barrier.)
  barrier_fences_.recorded_barrier(epoch);
  return epoch;
}

bool Pool::barrier_for_handout() {
  // As after a promotion: while barriers fail, cudaFree frees are fenced as they come.
  const std::uint64_t epoch = barrier_on_request(&PoolStats::handout_barriers);
  barrier_failed_ = epoch == 0;
  if (barrier_failed_) return false;
  // The cudaFree frees waiting for a barrier were made before this one: it
  // puts them back too, so that no promotion makes another. (A handout
  // barrier is made only without a page mover, as promotions are, here
  // with no record behind it.)
  if (frees_behind_barrier() && !deferred_.empty()) release_deferred_behind(epoch);
  return true;
}

util::Status Pool::make_stream_safe(Block* block, std::uintptr_t stream, bool ordered) {
  const std::uintptr_t last = block->stream;
  if (last == kNoPendingWork) return util::Status::success();
  // Behind a device barrier: every stream's new work follows the old.
  if (last == kAfterBarrier) {
    block->stream = kNoPendingWork;
    return util::Status::success();
  }
  if (ordered && last == stream) return util::Status::success();
  // A cudaMalloc-style request over a block the legacy stream freed in its
  // order, while all work is on that stream: whatever the new owner queues
  // runs after the free, as for a cudaFree-style free put back in legacy
  // order (frees_in_legacy_order()), and needs no fence, no driver call and
  // no host wait.
  if (!ordered && last == 0 && frees_in_legacy_order()) {
    block->stream = kNoPendingWork;
    return util::Status::success();
  }
  if (settle(*block, fences_)) return util::Status::success();
  // A barrier orders this context's streams only. An ordered request names
  // one of them; a cudaMalloc-style one may be used from anywhere on the
  // device, so it is ordered by a barrier only while no other context can
  // reach the pool's memory. Not with a page mover: its moves of a live
  // block's pages are not all ordered after a barrier.
  const bool barriers_order_it = mover_ == nullptr && (ordered || registry_.one_context());
  // Freed before the newest device barrier: all work queued from now on,
  // on any of the context's streams, runs after its free's (as for a block
  // put back behind one).
  if (barriers_order_it && block->free_epoch < barrier_epoch_) {
    block->stream = kNoPendingWork;
    return util::Status::success();
  }

  driver::ScopedContext scope(api_, context_);
  // A cudaMalloc-style request names no stream to order its work after the
  // free's: a device barrier orders all later work after it instead of the
  // host waiting, as for cudaFree frees. No query first: on a device that
  // lags the work is rarely done, a query costs about what a barrier over a
  // few streams costs, and the barrier also covers every block freed before it.
  if (!ordered && barriers_order_it && options_.free_barrier && barrier_for_handout()) {
    block->stream = kNoPendingWork;
    return util::Status::success();
  }
  bool had_to_wait = false;
  const util::Status fenced = fences_.order_after(last, block->free_epoch, stream, ordered, &had_to_wait);
  if (had_to_wait) stats_.cross_stream_waits++;
  if (!fenced) {
    // Not known to be finished: only a whole-context wait proves it.
    if (!synchronize_context()) return fenced;
  }
  block->stream = kNoPendingWork;
  return util::Status::success();
}

void Pool::stream_destroyed(std::uintptr_t stream, bool retired) {
  const std::uintptr_t key = stream_key(stream);
  if (key == 0 || is_per_thread_key(key)) return;
  std::lock_guard<util::SpinLock> guard(lock_);
  if (!fences_.met(key)) return;  // never used here: nothing can be pending on it
  // Free blocks with work still pending on the stream join the cudaFree
  // frees: the registry's event on the dying stream is part of their fence.
  std::vector<Block*> pending;
  for (Arena& arena : arenas_) {
    arena.index().for_each_by_address([&](const Block* b) {
      if (b->stream == key) pending.push_back(const_cast<Block*>(b));
    });
  }
  driver::ScopedContext scope(api_, context_);
  for (Block* b : pending) {
    if (settle(*b, fences_)) continue;
    arena_of(b).index().erase(b);
    deferred_.add(b, b->segment->reservation->mapped_bytes(b->address, b->size));
  }
  if (!pending.empty()) deferred_.close_batch(/*needs_sync=*/!retired);
  stats_.deferred_bytes = deferred_.bytes();
  fences_.forget(key);
}

}  // namespace tidepool::pool
