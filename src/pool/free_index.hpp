// FreeIndex: the free blocks of one arena, searchable in O(log n) expected.
//
// Two intrusive treaps over the same blocks: one ordered by (size, address)
// for best and worst fit, one ordered by address and augmented with the
// largest size in each subtree, for first, last and next fit. A block's size
// or address changes only while it is out of the index (erase, modify,
// insert). Not thread-safe; the pool serialises calls.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pool/block.hpp"
#include "util/util.hpp"

namespace tidepool::pool {

struct BySizeTraits {
  static Block*& left(Block* b) noexcept { return b->size_left; }
  static Block*& right(Block* b) noexcept { return b->size_right; }
  static std::uint32_t priority(const Block* b) noexcept { return b->priority; }
  static bool less(const Block* a, const Block* b) noexcept {
    return a->size != b->size ? a->size < b->size : a->address < b->address;
  }
  static void update(Block*) noexcept {}
};

struct ByAddressTraits {
  static Block*& left(Block* b) noexcept { return b->address_left; }
  static Block*& right(Block* b) noexcept { return b->address_right; }
  static std::uint32_t priority(const Block* b) noexcept { return b->priority; }
  static bool less(const Block* a, const Block* b) noexcept { return a->address < b->address; }
  static std::size_t max_of(const Block* b) noexcept { return b != nullptr ? b->subtree_max_size : 0; }
  static void update(Block* b) noexcept {
    std::size_t m = b->size;
    if (max_of(b->address_left) > m) m = max_of(b->address_left);
    if (max_of(b->address_right) > m) m = max_of(b->address_right);
    b->subtree_max_size = m;
  }
};

class FreeIndex {
 public:
  void insert(Block* b) noexcept;
  void erase(Block* b) noexcept;
  // `b`, in the index, now spans [address, address + size): a range that
  // still lies between the same free neighbours (carved from either end, or
  // grown into a neighbour that was not free). The address tree keeps its
  // place and priority; the size tree places it again.
  void reshape(Block* b, std::uintptr_t address, std::size_t size) noexcept;

  [[nodiscard]] bool empty() const noexcept { return by_size_.empty(); }
  [[nodiscard]] std::size_t count() const noexcept { return by_size_.size(); }
  [[nodiscard]] std::size_t total_bytes() const noexcept { return total_bytes_; }
  [[nodiscard]] Block* largest() const noexcept { return by_size_.last(); }

  // Smallest size >= n; the lowest address among equal sizes.
  [[nodiscard]] Block* best_fit(std::size_t n) const noexcept;
  // Lowest address with size >= n.
  [[nodiscard]] Block* first_fit(std::size_t n) const noexcept;
  // Highest address with size >= n.
  [[nodiscard]] Block* last_fit(std::size_t n) const noexcept;
  // Lowest address >= cursor with size >= n, else first_fit(n).
  [[nodiscard]] Block* next_fit(std::size_t n, std::uintptr_t cursor) const noexcept;
  // The largest block, when its size is >= n.
  [[nodiscard]] Block* worst_fit(std::size_t n) const noexcept;
  // The block after `b` in (size, address) order, or null.
  [[nodiscard]] Block* next_by_size(const Block* b) const noexcept;
  // The block whose range holds `address`, or null.
  [[nodiscard]] Block* containing(std::uintptr_t address) const noexcept;

  template <typename F>
  void for_each_by_address(F&& f) const {
    by_address_.for_each([&](Block* b) { f(static_cast<const Block*>(b)); });
  }

  // Both trees ordered, heap-ordered and correctly augmented; for tests.
  [[nodiscard]] bool check_invariants() const;

 private:
  util::IntrusiveTreap<Block, BySizeTraits> by_size_;
  util::IntrusiveTreap<Block, ByAddressTraits> by_address_;
  std::size_t total_bytes_ = 0;
};

}  // namespace tidepool::pool
