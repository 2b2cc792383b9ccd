// Split and coalesce: how free blocks are carved and merged.
//
// Invariants: the blocks of a segment tile it (prev/next are address
// neighbours); a free block in the index is never next to another free block
// in the index unless the two have work pending on different streams, which
// are never merged, so every free block has at most one stream to wait for.
// The carved piece keeps the chosen block's pending stream; make_stream_safe
// decides whether the request may use it.
#include <algorithm>

#include "pool/pool.hpp"
#include "pool/stream_keys.hpp"

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

void Pool::release_to_index(Arena& arena, Block* block) {
  block->is_free = true;
  if (Block* prev = block->prev; prev != nullptr && prev->is_free && prev->in_index && mergeable(prev, block)) {
    arena.index.erase(prev);
    prev->size += block->size;
    prev->next = block->next;
    if (block->next != nullptr) block->next->prev = prev;
    if (prev->stream == kNoPendingWork) prev->stream = block->stream;
    prev->free_epoch = std::max(prev->free_epoch, block->free_epoch);
    prev->freed_at = std::max(prev->freed_at, block->freed_at);
    blocks_.recycle(block);
    block = prev;
  }
  if (Block* next = block->next; next != nullptr && next->is_free && next->in_index && mergeable(block, next)) {
    arena.index.erase(next);
    block->size += next->size;
    block->next = next->next;
    if (next->next != nullptr) next->next->prev = block;
    if (block->stream == kNoPendingWork) block->stream = next->stream;
    block->free_epoch = std::max(block->free_epoch, next->free_epoch);
    block->freed_at = std::max(block->freed_at, next->freed_at);
    blocks_.recycle(next);
  }
  arena.index.insert(block);
}

}  // namespace tidepool::pool
