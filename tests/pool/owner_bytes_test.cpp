// OwnerBytes: what each owner held at the pool's live peak, kept lazily,
// against a model that copies every owner's bytes at each peak; and each
// owner's own peak, counts and failures.
#include "pool/owner_bytes.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <random>
#include <vector>

namespace tidepool::pool {
namespace {

TEST(OwnerBytes, WhatEachOwnerHeldAtThePeakMatchesACopyTakenAtEveryPeak) {
  constexpr std::size_t kOwnersUsed = 6;
  std::mt19937 rng(7);
  OwnerBytes owners;
  std::array<std::uint64_t, kOwnersUsed> live{};
  std::array<std::uint64_t, kOwnersUsed> at_peak{};
  std::array<std::uint64_t, kOwnersUsed> own_peak{};
  std::vector<std::pair<std::uint16_t, std::uint64_t>> blocks;
  std::uint64_t total = 0;
  std::uint64_t peak = 0;
  for (int step = 0; step < 20000; ++step) {
    if (blocks.empty() || rng() % 100 < 55) {
      const auto owner = static_cast<std::uint16_t>(rng() % kOwnersUsed);
      const std::uint64_t size = 1 + rng() % 4096;
      total += size;
      live[owner] += size;
      own_peak[owner] = std::max(own_peak[owner], live[owner]);
      const bool new_peak = total > peak;
      if (new_peak) {
        peak = total;
        at_peak = live;
      }
      owners.allocated(owner, size, new_peak);
      blocks.emplace_back(owner, size);
    } else {
      const std::size_t i = rng() % blocks.size();
      const auto [owner, size] = blocks[i];
      blocks[i] = blocks.back();
      blocks.pop_back();
      total -= size;
      live[owner] -= size;
      owners.freed(owner, size);
    }
    if (step % 997 == 0) {
      OwnerBytes copy = owners;
      copy.settle();
      std::uint64_t sum = 0;
      for (std::size_t o = 0; o < kOwnersUsed; ++o) {
        ASSERT_EQ(copy[o].live_at_peak_bytes, at_peak[o]) << "owner " << o << " at step " << step;
        ASSERT_EQ(copy[o].live_bytes, live[o]);
        ASSERT_EQ(copy[o].peak_live_bytes, own_peak[o]);
        sum += copy[o].live_at_peak_bytes;
      }
      ASSERT_EQ(sum, peak) << "what the owners held at the peak adds up to it";
    }
  }
}

TEST(OwnerBytes, CountsAllocationsFailuresAndTheTagsUsed) {
  OwnerBytes owners;
  EXPECT_EQ(owners.used(), 0u);
  owners.allocated(3, 100, true);
  owners.failed(7);
  owners.allocated(3, 50, true);
  owners.freed(3, 100);
  owners.settle();
  EXPECT_EQ(owners.used(), 8u);
  EXPECT_EQ(owners[3].allocations, 2u);
  EXPECT_EQ(owners[3].requested_bytes, 150u);
  EXPECT_EQ(owners[3].live_bytes, 50u);
  EXPECT_EQ(owners[3].live_at_peak_bytes, 150u);
  EXPECT_EQ(owners[7].failures, 1u);
  EXPECT_EQ(owners[7].allocations, 0u);
  EXPECT_EQ(OwnerBytes::clamp(300), 0) << "a tag past the table counts as not known";
  EXPECT_EQ(OwnerBytes::clamp(255), 255);
}

}  // namespace
}  // namespace tidepool::pool
