// Split and coalesce: how free blocks are carved and merged.
//
// Invariants: the blocks of a segment tile it (prev/next are address
// neighbours); a free block in the index is never next to another free block
// in the index unless the two have work pending on different streams, which
// are never merged, so every free block has at most one stream to wait for.
// The carved piece keeps the chosen block's pending stream; make_stream_safe
// decides whether the request may use it.
#include <algorithm>

#include "order/order.hpp"
#include "pool/pool.hpp"

namespace tidepool::pool {

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

// Two free neighbours merge unless each has work pending on a different
// stream: a block then never needs more than one stream's fence.
bool Pool::mergeable(Block* a, Block* b) {
  if (a->stream == b->stream || a->stream == kNoPendingWork || b->stream == kNoPendingWork) return true;
  return settle(a) || settle(b);
}

// Folds `high` (the address neighbour above `low`) into `low`; the merged
// block keeps the pending stream either had and the latest of their times.
void Pool::absorb(Block* low, Block* high) {
  low->size += high->size;
  low->next = high->next;
  if (high->next != nullptr) high->next->prev = low;
  if (low->stream == kNoPendingWork) low->stream = high->stream;
  low->free_epoch = std::max(low->free_epoch, high->free_epoch);
  low->freed_at = std::max(low->freed_at, high->freed_at);
  blocks_.recycle(high);
}

void Pool::release_to_index(Arena& arena, Block* block) {
  block->is_free = true;
  if (Block* prev = block->prev; prev != nullptr && prev->is_free && prev->in_index && mergeable(prev, block)) {
    arena.index.erase(prev);
    absorb(prev, block);
    block = prev;
  }
  if (Block* next = block->next; next != nullptr && next->is_free && next->in_index && mergeable(block, next)) {
    arena.index.erase(next);
    absorb(block, next);
  }
  arena.index.insert(block);
}

}  // namespace tidepool::pool
