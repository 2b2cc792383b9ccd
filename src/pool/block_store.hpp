// BlockStore: where Block metadata lives. Blocks come from slabs of a few
// hundred, recycled through a free list, so splitting and coalescing never
// call the heap except when a new slab is needed (amortised, rare). Slabs are
// freed only with the store. Not thread-safe; the pool serialises calls.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "pool/block.hpp"

namespace tidepool::pool {

class BlockStore {
 public:
  Block* make() {
    if (free_.empty()) grow();
    Block* b = free_.back();
    free_.pop_back();
    *b = Block{};
    ++in_use_;
    return b;
  }
  void recycle(Block* b) {
    free_.push_back(b);
    --in_use_;
  }
  [[nodiscard]] std::size_t in_use() const noexcept { return in_use_; }

 private:
  static constexpr std::size_t kSlab = 512;
  void grow() {
    slabs_.push_back(std::make_unique<Block[]>(kSlab));
    free_.reserve(free_.size() + kSlab);
    Block* slab = slabs_.back().get();
    for (std::size_t i = kSlab; i > 0; --i) free_.push_back(&slab[i - 1]);
  }

  std::vector<std::unique_ptr<Block[]>> slabs_;
  std::vector<Block*> free_;
  std::size_t in_use_ = 0;
};

}  // namespace tidepool::pool
