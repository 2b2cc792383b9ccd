// DeferredFrees: blocks freed with cudaFree semantics, held out of the pool
// until the work queued before their free has finished on every stream of
// the context. Each free is fenced at once with events (no free pays for a
// device-wide synchronisation), so its block can come back as soon as the
// device is past it; while the previous fence is still in flight, new frees
// join the next one.
//
// The rule, and why it is complete. A block freed at time T may be reused
// once all work queued before T has finished. Work queued before T sits on
//   (a) the legacy default stream;
//   (b) blocking streams: created ones, every thread's per-thread default
//       stream, and destroyed ones whose work still runs. The legacy stream
//       waits for all earlier work of every blocking stream, so ONE event
//       recorded on the legacy stream after T covers (a) and (b);
//   (c) live non-blocking streams, which the legacy stream does not wait for:
//       one event recorded on each, listed by the order::StreamRegistry;
//   (d) destroyed non-blocking streams: the event the registry recorded on
//       each just before it was destroyed, behind all of its work.
// A batch's fence is those events, recorded after the batch's last free. It
// is finished when every event reports CUDA_SUCCESS. Anything that leaves a
// gap in that list marks the fence `needs_sync`: the registry is not known to
// see every stream creation, a record failed, a stream (or the legacy stream,
// implicitly) was capturing so nothing could be recorded on it, or a query
// answered an error other than CUDA_ERROR_NOT_READY. Such a fence is proven
// only by a cuCtxSynchronize that succeeds after the fence was made, which
// only the waiting path performs, and never while any stream of the context
// is capturing (the synchronisation would invalidate the capture). Until then
// its blocks stay out of circulation: nothing is ever reused on a guess.
//
// Batches finish in order: a batch is promoted only after every earlier one.
//
// Not thread-safe: the owning pool's lock guards every call.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "driver/driver.hpp"
#include "order/order.hpp"
#include "pool/block.hpp"

namespace tidepool::pool {

class DeferredFrees {
 public:
  DeferredFrees(const driver::Api& api, CUcontext context, order::StreamRegistry& registry, order::EventCache& events);
  ~DeferredFrees();
  DeferredFrees(const DeferredFrees&) = delete;
  DeferredFrees& operator=(const DeferredFrees&) = delete;

  // Holds `block`; close_batch() fences it (and any other unfenced block).
  void add(Block* block);
  // Fences the frees not yet fenced (the context must be current).
  // `needs_sync`: the caller knows of work the events cannot cover.
  void close_batch(bool needs_sync = false);
  // close_batch(), unless the newest fence is still in flight: then the
  // frees wait for the next call (or a promotion) to be fenced, so a busy
  // device sees one record per round trip rather than one per free.
  void fence_when_idle();
  // How long promote() may wait: not at all, or for every fence, proving
  // `needs_sync` fences with a context synchronisation.
  enum class Wait { none, everything };
  // Hands every block whose fence is known finished to `release`, in order.
  // Returns how many blocks were released.
  template <typename Release>
  std::size_t promote(Wait wait, Release&& release) {
    const std::size_t ready = finished_prefix(wait);
    drop_prefix(ready);  // counts the bytes before release() merges blocks
    for (std::size_t i = 0; i < ready; ++i) release(blocks_[i]);
    blocks_.erase(blocks_.begin(), blocks_.begin() + static_cast<std::ptrdiff_t>(ready));
    return ready;
  }

  // Hands every block to `release` at once, without looking at the fences:
  // for a caller that has ordered all later work after them (a device
  // barrier). Their events go back to the cache.
  template <typename Release>
  std::size_t release_all(Release&& release) {
    const std::size_t count = blocks_.size();
    drop_fences();
    drop_prefix(count);
    for (Block* b : blocks_) release(b);
    blocks_.clear();
    return count;
  }
  [[nodiscard]] bool empty() const noexcept { return blocks_.empty(); }
  // Whether promote() without waiting could release anything: the oldest
  // fence is not one only a synchronisation proves.
  [[nodiscard]] bool may_finish_unaided() const noexcept {
    return !blocks_.empty() && (fences_.empty() ? registry_.complete() : !fences_.front().needs_sync);
  }
  [[nodiscard]] std::size_t size() const noexcept { return blocks_.size(); }
  [[nodiscard]] std::uint64_t bytes() const noexcept { return bytes_; }
  // Whether any stream the fences would cover is capturing now.
  [[nodiscard]] bool capture_in_progress() const;

 private:
  struct Fence {
    std::vector<CUevent> events;
    std::vector<std::shared_ptr<order::RetiredStream>> retired;
    bool needs_sync = false;
    std::size_t end = 0;  // blocks_[..end) are covered
  };
  // How many leading blocks have finished fences; drops those fences.
  std::size_t finished_prefix(Wait wait);
  // Forgets the first `count` blocks' bytes and fences (the caller erases them).
  void drop_prefix(std::size_t count);
  // Forgets every fence, giving its events back (or destroying them, for a
  // fence that erred: such an event may sit in a capture).
  void drop_fences();
  bool fence_finished(Fence& fence, bool wait);
  bool synchronize_context();

  const driver::Api& api_;
  CUcontext context_;
  order::StreamRegistry& registry_;
  order::EventCache& events_;
  std::vector<Block*> blocks_;
  std::vector<Fence> fences_;
  std::size_t fenced_ = 0;  // blocks_[..fenced_) have a fence
  std::uint64_t bytes_ = 0;
  std::vector<CUstream> scratch_streams_;
};

}  // namespace tidepool::pool
