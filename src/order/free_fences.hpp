// FreeFences: when frees made with cudaFree semantics are known finished.
// The frees themselves (what was freed) are the caller's: this counts them
// in order and fences them with events, so that the oldest can be handed
// back once the work queued before them has finished on every stream of the
// context. Each free is fenced at once (no free pays for a device-wide
// synchronisation), so it can come back as soon as the device is past it;
// while the previous fence is still in flight, new frees join the next one.
//
// The rule. A free at time T may be handed back once all work queued
// before T has finished, on every stream of the context: a ContextFence
// (context_fence.hpp, which says why its events cover all such work)
// recorded after the batch's last free. A fence with a gap (the registry is
// not known to see every stream creation, a record failed, a stream was
// capturing, or a query answered an error other than CUDA_ERROR_NOT_READY)
// is `needs_sync`: proven only by a cuCtxSynchronize that succeeds after the
// fence was made, which only the waiting path performs, and never while any
// stream of the context is capturing (the synchronisation would invalidate
// the capture). Until then its frees stay held: nothing is ever handed back
// on a guess.
//
// Batches finish in order: a free is handed back only after every earlier one.
//
// Not thread-safe: the owner's lock guards every call.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <vector>

#include "driver/driver.hpp"
#include "order/context_fence.hpp"
#include "order/event_cache.hpp"
#include "order/stream_registry.hpp"

namespace tidepool::order {

class FreeFences {
 public:
  FreeFences(const driver::Api& api, CUcontext context, StreamRegistry& registry, EventCache& events);
  ~FreeFences();
  FreeFences(const FreeFences&) = delete;
  FreeFences& operator=(const FreeFences&) = delete;

  // One more free held, after all those before it; not fenced yet.
  void added() noexcept { ++held_; }
  // Fences the frees not yet fenced (the context must be current).
  // `needs_sync`: the caller knows of work the events cannot cover.
  void close_batch(bool needs_sync = false);
  // close_batch(), unless the newest fence is still in flight: then the
  // frees wait for the next call (or a hand-back) to be fenced, so a busy
  // device sees one record per round trip rather than one per free.
  void fence_when_idle();
  // How long finished() may wait: not at all, or for every fence, proving
  // `needs_sync` fences with a context synchronisation.
  enum class Wait { none, everything };
  // How many of the oldest frees are known finished; they are forgotten
  // (with their fences), so the caller hands them back now.
  std::size_t take_finished(Wait wait);
  // Forgets every free and fence at once, giving the events back: for a
  // caller that has ordered all later work after them (a device barrier).
  void take_all();

  [[nodiscard]] std::size_t held() const noexcept { return held_; }
  // Whether take_finished() without waiting could hand anything back: the
  // oldest fence is not one only a synchronisation proves.
  [[nodiscard]] bool may_finish_unaided() const noexcept {
    return held_ > 0 && (fences_.empty() ? registry_.complete() : !fences_.front().fence.needs_sync());
  }
  // Whether any stream the fences would cover is capturing now.
  [[nodiscard]] bool capture_in_progress() const;

 private:
  struct Fence {
    ContextFence fence;
    std::size_t end = 0;  // the frees before this one (counted from the oldest held) are covered
  };
  bool synchronize_context();
  const driver::Api& api_;
  CUcontext context_;
  StreamRegistry& registry_;
  EventCache& events_;
  std::vector<Fence> fences_;
  std::size_t held_ = 0;
  std::size_t fenced_ = 0;  // the oldest fenced_ of the held frees have a fence
  std::vector<CUstream> scratch_streams_;
};

}  // namespace tidepool::order
