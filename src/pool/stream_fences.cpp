// Stream fences: when a block freed in stream order may go to new work.
//
// Invariant: a free block with stream != kNoPendingWork may have queued work
// on that stream (its key) up to its free_epoch. It goes to work on the same
// stream at once; to another stream only after that stream waits on an event
// recorded after the free (or the event is known finished); to a
// cudaMalloc-style request only once the event finished on the host. A block
// put back behind a device barrier (kAfterBarrier) goes to any work at once;
// its "stream" for settling is the legacy stream, which is behind the barrier. A
// stream's finished_epoch only grows, and only from an event that reported
// CUDA_SUCCESS or a context synchronisation that succeeded: a failed call is
// never read as "finished".
#include <algorithm>
#include <mutex>

#include "order/order.hpp"
#include "pool/pool.hpp"

namespace tidepool::pool {

using order::stream_keys::fence_handle;
using order::stream_keys::is_per_thread_key;
using order::stream_keys::stream_key;

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

bool Pool::settle_by_query(Block* block, std::uintptr_t may_wait_for, bool wait_for_barrier) {
  if (settle(block)) return true;
  const std::uintptr_t key = block->stream;
  StreamState& state = streams_[key];
  if (key == kAfterBarrier) {
    // The record behind the block's own barrier answers before one made now
    // at the tail of the queue would.
    const std::uint64_t done = barrier_fences_.finished_through(wait_for_barrier ? block->free_epoch : 0);
    state.finished_epoch = std::max(state.finished_epoch, done);
    if (settle(block)) return true;
  }
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

bool Pool::promote_deferred_behind_barrier() {
  if (!options_.free_barrier || deferred_.empty()) return false;
  // While barriers fail (a capture, too many streams), frees are fenced as
  // they come (deallocate), so that promotions without a wait find them done.
  barrier_failed_ = !registry_.device_barrier(context_);
  if (barrier_failed_) return false;
  // The blocks' earlier work may still run; nothing that runs later can
  // overlap it. Unmapping their pages waits for a record on the legacy
  // stream made after this barrier (settle_by_query), or a synchronisation.
  const std::uint64_t epoch = ++epoch_;
  unsynchronized_async_frees_ = true;
  stats_.device_barriers++;
  // Only eviction waits for one barrier's work (a learned bring-back taking
  // pages of blocks freed a launch ago); without it the record would cost
  // every promotion a record and a query for answers nothing asks.
  if (mover_ != nullptr) barrier_fences_.recorded_barrier(epoch);
  deferred_.release_all([&](Block* b) {
    b->stream = kAfterBarrier;
    b->free_epoch = epoch;
    release_to_index(arena_of(b), b);
  });
  stats_.deferred_bytes = deferred_.bytes();
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

}  // namespace tidepool::pool
