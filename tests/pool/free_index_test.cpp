// Specification of FreeIndex: every fit query agrees with a linear scan of
// the free blocks it holds, under random inserts and erases, and both trees
// stay ordered, heap-ordered and augmented.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "pool/pool.hpp"

namespace tidepool::pool {
namespace {

// The answer each query should give, by a scan of `present` blocks.
struct Scan {
  const std::vector<Block*>& present;
  [[nodiscard]] Block* best_fit(std::size_t n) const {
    Block* best = nullptr;
    for (Block* b : present) {
      if (b->size >= n &&
          (best == nullptr || b->size < best->size || (b->size == best->size && b->address < best->address))) {
        best = b;
      }
    }
    return best;
  }
  [[nodiscard]] Block* first_fit(std::size_t n, std::uintptr_t from = 0) const {
    Block* first = nullptr;
    for (Block* b : present) {
      if (b->size >= n && b->address >= from && (first == nullptr || b->address < first->address)) first = b;
    }
    return first;
  }
  [[nodiscard]] Block* last_fit(std::size_t n) const {
    Block* last = nullptr;
    for (Block* b : present) {
      if (b->size >= n && (last == nullptr || b->address > last->address)) last = b;
    }
    return last;
  }
  [[nodiscard]] Block* worst_fit(std::size_t n) const {
    Block* worst = nullptr;
    for (Block* b : present) {
      if (worst == nullptr || b->size > worst->size || (b->size == worst->size && b->address > worst->address)) {
        worst = b;
      }
    }
    return worst != nullptr && worst->size >= n ? worst : nullptr;
  }
  [[nodiscard]] Block* containing(std::uintptr_t address) const {
    for (Block* b : present) {
      if (address >= b->address && address < b->address + b->size) return b;
    }
    return nullptr;
  }
};

TEST(FreeIndex, EveryFitAgreesWithALinearScanUnderRandomWork) {
  std::mt19937_64 random(3);
  // Disjoint ranges (as blocks are): slot i at base + i * 1 MiB, sizes below
  // that, many equal so that ties by address are exercised.
  constexpr std::uintptr_t kBase = 0x7f0000000000;
  constexpr std::size_t kSlot = std::size_t{1} << 20;
  std::vector<Block> blocks(600);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    blocks[i].address = kBase + i * kSlot;
    blocks[i].size = 512 * (1 + random() % 64) * ((random() % 4) == 0 ? 32 : 1);
    blocks[i].priority = static_cast<std::uint32_t>(random());
  }
  FreeIndex index;
  std::vector<Block*> present;
  std::size_t total = 0;
  for (int step = 0; step < 6000; ++step) {
    Block* b = &blocks[random() % blocks.size()];
    auto at = std::find(present.begin(), present.end(), b);
    if (at != present.end()) {
      index.erase(b);
      present.erase(at);
      total -= b->size;
    } else {
      index.insert(b);
      present.push_back(b);
      total += b->size;
    }
    ASSERT_EQ(index.count(), present.size());
    ASSERT_EQ(index.total_bytes(), total);
    if (step % 500 == 0) {
      ASSERT_TRUE(index.check_invariants()) << "step " << step;
    }
    const Scan scan{present};
    for (int q = 0; q < 4; ++q) {
      const std::size_t n = 512 * (1 + random() % 2200);
      const std::uintptr_t cursor = kBase + (random() % blocks.size()) * kSlot + 512 * (random() % 4);
      ASSERT_EQ(index.best_fit(n), scan.best_fit(n)) << "best_fit(" << n << ")";
      ASSERT_EQ(index.first_fit(n), scan.first_fit(n)) << "first_fit(" << n << ")";
      ASSERT_EQ(index.last_fit(n), scan.last_fit(n)) << "last_fit(" << n << ")";
      ASSERT_EQ(index.worst_fit(n), scan.worst_fit(n)) << "worst_fit(" << n << ")";
      Block* next = scan.first_fit(n, cursor);
      ASSERT_EQ(index.next_fit(n, cursor), next != nullptr ? next : scan.first_fit(n)) << "next_fit(" << n << ")";
      ASSERT_EQ(index.containing(cursor + 256), scan.containing(cursor + 256));
    }
  }
  ASSERT_TRUE(index.check_invariants());
  Block* largest = index.largest();
  ASSERT_NE(largest, nullptr);
  for (Block* b : present) EXPECT_LE(b->size, largest->size);
  std::uintptr_t previous = 0;
  std::size_t walked = 0;
  index.for_each_by_address([&](const Block* b) {
    EXPECT_GT(b->address, previous);
    previous = b->address;
    ++walked;
  });
  EXPECT_EQ(walked, present.size());
}

}  // namespace
}  // namespace tidepool::pool
