// Arena: the free blocks of one size range (small or large requests) and the
// segments they tile; carving a block out of a free one and merging on free.
//
// Invariants: the blocks of a segment tile it (prev/next are address
// neighbours); a free block in the index is never next to another free block
// in the index unless the two have work pending on different streams, which
// are never merged, so every free block has at most one stream to wait for.
// The carved piece keeps the chosen block's pending stream; the pool decides
// whether the request may use it. Not thread-safe; the pool serialises calls.
#pragma once

#include <cstddef>
#include <vector>

#include "order/order.hpp"
#include "pool/block.hpp"
#include "pool/block_store.hpp"
#include "pool/free_index.hpp"
#include "pool/placement/policy.hpp"
#include "pool/segments.hpp"

namespace tidepool::pool {

class Arena {
 public:
  // `blocks`, `policy` and `fences` are the pool's and outlive the arena.
  Arena(int id, BlockStore& blocks, PlacementPolicy& policy, const order::StreamFences& fences)
      : id_(id), blocks_(blocks), policy_(policy), fences_(fences) {}
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  [[nodiscard]] int id() const noexcept { return id_; }
  [[nodiscard]] FreeIndex& index() noexcept { return index_; }
  [[nodiscard]] const FreeIndex& index() const noexcept { return index_; }
  [[nodiscard]] const std::vector<Segment*>& segments() const noexcept { return segments_; }

  // `segment` (tiled by one free block) joins the arena.
  void add(Segment* segment);
  // `segment`, whose one block is free and in the index, leaves the arena;
  // its block goes back to the store.
  void remove(Segment* segment);
  // Cuts `rounded` bytes out of `chosen` (free, in the index) at the end the
  // policy names; the rest stays free in the index. Returns the piece, live.
  Block* carve(Block* chosen, std::size_t rounded, const Request& request);
  // The end the policy would cut a request the size of free block `b` from:
  // the end a large request uses first.
  [[nodiscard]] CarveEnd end_carved_first(const Block& b) const noexcept {
    return policy_.carve_end(b, Request{.size = b.size, .stream = kNoPendingWork, .small = id_ == 0, .sequence = 0});
  }
  // `block` is free again: merged with its free neighbours where their
  // pending work allows, then indexed.
  void release(Block* block);

 private:
  bool mergeable(Block* a, Block* b);
  void absorb(Block* low, Block* high);
  [[gnu::always_inline]] std::size_t absorb_free_next(Block* low);
  [[gnu::noinline]] void merge_into_below(Block* prev, Block* block);

  int id_;
  BlockStore& blocks_;
  PlacementPolicy& policy_;
  const order::StreamFences& fences_;
  FreeIndex index_;
  std::vector<Segment*> segments_;
};

}  // namespace tidepool::pool
