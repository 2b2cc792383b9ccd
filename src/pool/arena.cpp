// Arena: see arena.hpp for the invariants.
#include "pool/arena.hpp"

#include <algorithm>

namespace tidepool::pool {

void Arena::add(Segment* segment) {
  segments_.push_back(segment);
  index_.insert(segment->first);
}

void Arena::remove(Segment* segment) {
  index_.erase(segment->first);
  blocks_.recycle(segment->first);
  std::erase(segments_, segment);
}

Block* Arena::carve(Block* chosen, std::size_t rounded, const Request& request) {
  Block* result = chosen;
  if (chosen->size > rounded) {
    Block* piece = blocks_.make();
    piece->segment = chosen->segment;
    piece->stream = chosen->stream;
    piece->free_epoch = chosen->free_epoch;
    piece->size = rounded;
    // The rest stays free where it was, between the same neighbours.
    std::uintptr_t rest = chosen->address;
    if (policy_.carve_end(*chosen, request) == CarveEnd::high) {
      piece->address = chosen->address + chosen->size - rounded;
      piece->prev = chosen;
      piece->next = chosen->next;
      if (chosen->next != nullptr) chosen->next->prev = piece;
      chosen->next = piece;
    } else {
      piece->address = chosen->address;
      rest += rounded;
      piece->prev = chosen->prev;
      piece->next = chosen;
      if (chosen->prev != nullptr) {
        chosen->prev->next = piece;
      } else {
        chosen->segment->first = piece;
      }
      chosen->prev = piece;
    }
    index_.reshape(chosen, rest, chosen->size - rounded);
    result = piece;
  } else {
    index_.erase(chosen);
  }
  result->is_free = false;
  policy_.on_carved(*result);
  return result;
}

// Two free neighbours merge unless each has work pending on a different
// stream: a block then never needs more than one stream's fence.
bool Arena::mergeable(Block* a, Block* b) {
  if (a->stream == b->stream || a->stream == kNoPendingWork || b->stream == kNoPendingWork) return true;
  return settle(*a, fences_) || settle(*b, fences_);
}

// Folds `high` (the address neighbour above `low`) into `low`, all but the
// size, which the caller sets (through the index where `low` is in it); the
// merged block keeps the pending stream either had and the latest of their
// times.
void Arena::absorb(Block* low, Block* high) {
  low->next = high->next;
  if (high->next != nullptr) high->next->prev = low;
  if (low->stream == kNoPendingWork) low->stream = high->stream;
  low->free_epoch = std::max(low->free_epoch, high->free_epoch);
  low->freed_at = std::max(low->freed_at, high->freed_at);
  blocks_.recycle(high);
}

// Folds a free, mergeable neighbour above `low` into it, out of the index;
// its bytes (0 when none was folded), which the caller adds to `low`.
inline std::size_t Arena::absorb_free_next(Block* low) {
  Block* next = low->next;
  if (next == nullptr || !next->is_free || !next->in_index || !mergeable(low, next)) return 0;
  const std::size_t bytes = next->size;
  index_.erase(next);
  absorb(low, next);
  return bytes;
}

// A free neighbour below stays in the index and grows in place, once
// however many merge into it (merge_into_below); one above leaves the
// index and joins.
void Arena::release(Block* block) {
  block->is_free = true;
  if (Block* prev = block->prev; prev != nullptr && prev->is_free && prev->in_index && mergeable(prev, block)) {
    merge_into_below(prev, block);
    return;
  }
  block->size += absorb_free_next(block);
  index_.insert(block);
}

void Arena::merge_into_below(Block* prev, Block* block) {
  std::size_t merged = prev->size + block->size;
  absorb(prev, block);
  merged += absorb_free_next(prev);
  index_.reshape(prev, prev->address, merged);
}

}  // namespace tidepool::pool
