// LiveSet: the blocks a pool has handed out and not taken back.
//
// It owns how they are found (by start address in a hash map, by any address
// inside them through a walk of their segment with a cache in front), their
// buffer ids, and the use clock that residency ranks them by. A block is in
// the set exactly while it is live: `requested` is non-zero and `is_free`
// false. Not thread-safe; the pool serialises calls.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "pool/block.hpp"
#include "pool/page_mover.hpp"
#include "pool/segments.hpp"
#include "util/util.hpp"

namespace tidepool::pool {

class LiveSet {
 public:
  // Gives this pool its share of the process-wide buffer id space.
  explicit LiveSet(const Segments& segments);

  // `block` goes to its caller: a new buffer id, used now.
  void add(Block* block) {
    block->buffer_id = id_base_ | ++ids_made_;
    map_.insert(block->address, block);
    block->last_use = ++use_clock_;
    block->keep_resident = false;
    block->pins = 0;
    block->read_on_host = false;
    block->peer_held = false;
    block->graph_holds = 0;
    block->import_holds = 0;
    block->freed_while_shared = false;
  }
  // The live block starting at `address`, out of the set; null when none.
  Block* remove(std::uintptr_t address) { return map_.erase(address); }
  // A block remove() took back in again, unchanged (a free that was refused).
  void restore(Block* block) { map_.insert(block->address, block); }

  [[nodiscard]] Block* starting_at(std::uintptr_t address) const { return map_.find(address); }
  // The live block whose range (its whole block, not only the bytes
  // requested) holds `address`, or null.
  [[nodiscard]] Block* containing(std::uintptr_t address) const;
  // A block's start (one hash lookup, the common case) or else containing().
  [[nodiscard]] Block* at(std::uintptr_t address) const {
    Block* block = map_.find(address);
    return block != nullptr ? block : containing(address);
  }
  [[nodiscard]] std::size_t size() const noexcept { return map_.size(); }

  // The use clock: larger is more recent.
  void mark_used(Block* block) { block->last_use = ++use_clock_; }
  // Every live block that may give up device pages: not keep-resident, not
  // used at or after `spared_from` (0: none spared), and holding a whole page
  // of its own. In segment and address order.
  void eviction_candidates(std::uint64_t spared_from, std::vector<EvictionCandidate>* out) const;
  // Device pages of blocks that would be candidates but for a submission's
  // pin: room that comes free for eviction once those submissions are
  // queued.
  [[nodiscard]] std::size_t pinned_device_pages() const;

 private:
  const Segments& segments_;
  util::AddressMap<Block> map_;
  // containing()'s cache, one block per 2 MiB stretch: a hint is trusted
  // only while map_ still maps its address to it, so a recycled Block is
  // never read as the block it was.
  mutable std::array<Block*, 256> hints_{};
  std::uint64_t id_base_ = 0;
  std::uint64_t ids_made_ = 0;
  std::uint64_t use_clock_ = 0;
};

}  // namespace tidepool::pool
