// FreeIndex queries. The address-tree searches prune every subtree whose
// largest block is too small, so each visits O(depth) nodes.
#include "pool/free_index.hpp"

namespace tidepool::pool {

namespace {

std::uint32_t priority_of(std::uintptr_t address) noexcept {
  std::uint64_t x = address * 0x9E3779B97F4A7C15ULL;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 32;
  return static_cast<std::uint32_t>(x);
}

Block* lowest_fit_at_or_after(Block* t, std::size_t n, std::uintptr_t cursor) noexcept {
  // The leftmost node with address >= cursor and size >= n in subtree t.
  if (t == nullptr || ByAddressTraits::max_of(t) < n) return nullptr;
  if (t->address < cursor) return lowest_fit_at_or_after(t->address_right, n, cursor);
  if (Block* left = lowest_fit_at_or_after(t->address_left, n, cursor)) return left;
  if (t->size >= n) return t;
  return lowest_fit_at_or_after(t->address_right, n, cursor);
}

}  // namespace

void FreeIndex::insert(Block* b) noexcept {
  b->priority = priority_of(b->address);
  by_size_.insert(b);
  by_address_.insert(b);
  b->in_index = true;
  total_bytes_ += b->size;
}

void FreeIndex::erase(Block* b) noexcept {
  by_size_.erase(b);
  by_address_.erase(b);
  b->in_index = false;
  total_bytes_ -= b->size;
}

void FreeIndex::reshape(Block* b, std::uintptr_t address, std::size_t size) noexcept {
  by_size_.erase(b);
  total_bytes_ = total_bytes_ - b->size + size;
  b->address = address;
  b->size = size;
  by_address_.refresh(b);
  by_size_.insert(b);
}

Block* FreeIndex::best_fit(std::size_t n) const noexcept {
  return by_size_.lower_bound([n](const Block* b) { return b->size < n; });
}

Block* FreeIndex::next_by_size(const Block* b) const noexcept {
  return by_size_.lower_bound([b](const Block* x) { return !BySizeTraits::less(b, x); });
}

Block* FreeIndex::worst_fit(std::size_t n) const noexcept {
  Block* b = by_size_.last();
  return b != nullptr && b->size >= n ? b : nullptr;
}

Block* FreeIndex::containing(std::uintptr_t address) const noexcept {
  Block* below = nullptr;  // the highest block starting at or below address
  for (Block* t = by_address_.root(); t != nullptr;) {
    if (t->address <= address) {
      below = t;
      t = t->address_right;
    } else {
      t = t->address_left;
    }
  }
  return below != nullptr && address - below->address < below->size ? below : nullptr;
}

Block* FreeIndex::first_fit(std::size_t n) const noexcept {
  Block* t = by_address_.root();
  if (ByAddressTraits::max_of(t) < n) return nullptr;
  for (;;) {
    if (ByAddressTraits::max_of(t->address_left) >= n) {
      t = t->address_left;
    } else if (t->size >= n) {
      return t;
    } else {
      t = t->address_right;
    }
  }
}

Block* FreeIndex::last_fit(std::size_t n) const noexcept {
  Block* t = by_address_.root();
  if (ByAddressTraits::max_of(t) < n) return nullptr;
  for (;;) {
    if (ByAddressTraits::max_of(t->address_right) >= n) {
      t = t->address_right;
    } else if (t->size >= n) {
      return t;
    } else {
      t = t->address_left;
    }
  }
}

Block* FreeIndex::next_fit(std::size_t n, std::uintptr_t cursor) const noexcept {
  if (Block* b = lowest_fit_at_or_after(by_address_.root(), n, cursor)) return b;
  return first_fit(n);
}

bool FreeIndex::check_invariants() const {
  const bool sizes_ok = by_size_.valid([](const Block* b) { return b->in_index; });
  const bool addresses_ok = by_address_.valid([](const Block* b) {
    std::size_t m = b->size;
    if (ByAddressTraits::max_of(b->address_left) > m) m = ByAddressTraits::max_of(b->address_left);
    if (ByAddressTraits::max_of(b->address_right) > m) m = ByAddressTraits::max_of(b->address_right);
    return b->subtree_max_size == m;
  });
  std::size_t bytes = 0;
  by_size_.for_each([&](const Block* b) { bytes += b->size; });
  return sizes_ok && addresses_ok && bytes == total_bytes_ && by_size_.size() == by_address_.size();
}

}  // namespace tidepool::pool
