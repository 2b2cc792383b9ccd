// DeferredFrees: blocks freed with cudaFree semantics, held out of the pool
// until the work queued before their free has finished on every stream of
// the context. The blocks are the pool's; when their frees are known
// finished is the order layer's (order/free_fences.hpp states the rule and
// why it covers every stream). Blocks come back in the order they were
// freed.
//
// Not thread-safe: the owning pool's lock guards every call.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "driver/driver.hpp"
#include "order/order.hpp"
#include "pool/block.hpp"

namespace tidepool::pool {

class DeferredFrees {
 public:
  DeferredFrees(const driver::Api& api, CUcontext context, order::StreamRegistry& registry, order::EventCache& events)
      : fences_(api, context, registry, events) {
    blocks_.reserve(1024);
  }

  // Holds `block`; close_batch() fences it (and any other unfenced block).
  // `backed_bytes`: what it counts in bytes(), the part of it that holds
  // memory (a free block may span unbacked address space too).
  void add(Block* block, std::uint64_t backed_bytes) {
    blocks_.push_back(Held{block, backed_bytes});
    bytes_ += backed_bytes;
    fences_.added();
  }
  // Fences the frees not yet fenced (the context must be current).
  // `needs_sync`: the caller knows of work the events cannot cover.
  void close_batch(bool needs_sync = false) { fences_.close_batch(needs_sync); }
  // See order::FreeFences::fence_when_idle.
  void fence_when_idle() { fences_.fence_when_idle(); }
  using Wait = order::FreeFences::Wait;
  // Hands every block whose fence is known finished to `release`, in order.
  // Returns how many blocks were released.
  template <typename Release>
  std::size_t promote(Wait wait, Release&& release) {
    const std::size_t ready = fences_.take_finished(wait);
    hand_back(ready, release);
    return ready;
  }
  // Hands every block to `release` at once, without looking at the fences:
  // for a caller that has ordered all later work after them (a device
  // barrier). Their events go back to the cache.
  template <typename Release>
  std::size_t release_all(Release&& release) {
    const std::size_t count = blocks_.size();
    fences_.take_all();
    hand_back(count, release);
    return count;
  }
  [[nodiscard]] bool empty() const noexcept { return blocks_.empty(); }
  // Whether promote() without waiting could release anything.
  [[nodiscard]] bool may_finish_unaided() const noexcept { return fences_.may_finish_unaided(); }
  [[nodiscard]] std::size_t size() const noexcept { return blocks_.size(); }
  // The backed bytes held (as given to add()).
  [[nodiscard]] std::uint64_t bytes() const noexcept { return bytes_; }
  // Whether any stream the fences would cover is capturing now.
  [[nodiscard]] bool capture_in_progress() const { return fences_.capture_in_progress(); }

 private:
  struct Held {
    Block* block;
    std::uint64_t bytes;
  };
  // The oldest `count` blocks to `release`; their bytes are counted off
  // first, since release() merges blocks.
  template <typename Release>
  void hand_back(std::size_t count, Release& release) {
    for (std::size_t i = 0; i < count; ++i) bytes_ -= blocks_[i].bytes;
    for (std::size_t i = 0; i < count; ++i) release(blocks_[i].block);
    blocks_.erase(blocks_.begin(), blocks_.begin() + static_cast<std::ptrdiff_t>(count));
  }

  order::FreeFences fences_;
  std::vector<Held> blocks_;
  std::uint64_t bytes_ = 0;
};

}  // namespace tidepool::pool
