// EvictionPolicy: each rule's order of the candidates, alone (no pool, no
// driver): least recently used, largest, and prefetch:learn's furthest next
// use on a learned step.
#include "residency/eviction_policy.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string_view>
#include <vector>

#include "residency/training_steps.hpp"

namespace tidepool::residency {
namespace {

std::vector<std::uintptr_t> addresses(const std::vector<RankedBlock>& blocks) {
  std::vector<std::uintptr_t> out;
  for (const RankedBlock& b : blocks) out.push_back(b.address);
  return out;
}

TEST(EvictionPolicy, EveryNameMakesItsPolicyAndAnUnknownOneMakesNone) {
  for (std::string_view name : eviction_policy_names()) {
    auto policy = make_eviction_policy(name);
    ASSERT_NE(policy, nullptr) << name;
    EXPECT_EQ(policy->name(), name);
  }
  EXPECT_EQ(make_eviction_policy("next_use"), nullptr) << "needs a schedule: not a configurable name";
  EXPECT_EQ(make_eviction_policy(""), nullptr);
  EXPECT_EQ(make_eviction_policy("LRU"), nullptr);
}

TEST(EvictionPolicy, LeastRecentlyUsedGoesFirstAndEqualUsesGoByAddress) {
  auto lru = make_eviction_policy("lru");
  std::vector<RankedBlock> blocks = {
      {0x3000, 4096, 7, 1, 0, 1}, {0x1000, 4096, 2, 9, 1, 2}, {0x2000, 4096, 7, 3, 2, 3}, {0x4000, 4096, 1, 1, 3, 4}};
  lru->order(blocks);
  EXPECT_EQ(addresses(blocks), (std::vector<std::uintptr_t>{0x4000, 0x1000, 0x2000, 0x3000}));
}

TEST(EvictionPolicy, LargestGoesFirstAndEqualSizesGoLeastRecentlyUsedFirst) {
  auto largest = make_eviction_policy("largest");
  std::vector<RankedBlock> blocks = {
      {0x1000, 0, 5, 2, 0, 1}, {0x2000, 0, 9, 8, 1, 2}, {0x3000, 0, 3, 2, 2, 3}, {0x4000, 0, 4, 8, 3, 4}};
  largest->order(blocks);
  EXPECT_EQ(addresses(blocks), (std::vector<std::uintptr_t>{0x4000, 0x2000, 0x3000, 0x1000}));
  // The caller's index travels with its block.
  EXPECT_EQ(blocks.front().source, 3u);
}

// On a learned step, halfway through its forward pass: the backward pass
// uses the activations last layer first, so the first layer's is needed
// last among them, and the weight only at the next step's first launch.
// Blocks the schedule has never seen go after every known one, least
// recently used first.
TEST(EvictionPolicy, FurthestNextUseFollowsTheLearnedStepAndPutsUnknownBlocksLast) {
  LaunchSchedule schedule;
  training::Steps steps(8);
  for (int i = 0; i < 3; ++i) (void)steps.step(schedule);
  ASSERT_EQ(schedule.period(), 16u);
  std::vector<ScheduledBlock> activation;
  for (int i = 0; i < 8; ++i) {
    activation.push_back(steps.fresh());
    std::vector<ScheduledBlock> named{steps.weight(), activation.back()};
    if (i > 0) named.insert(named.begin(), activation[static_cast<std::size_t>(i - 1)]);
    schedule.record(training::Steps::kKernel, named.data(), named.size());
  }
  const FurthestNextUse policy(schedule);
  EXPECT_EQ(policy.name(), "next_use");
  std::vector<RankedBlock> blocks;
  const auto add = [&](const ScheduledBlock& b, std::uint64_t last_use) {
    blocks.push_back({b.address, 4096, last_use, 1, blocks.size(), b.id});
  };
  add({900, 0x90000000}, 5);  // never launched
  for (const ScheduledBlock& a : activation) add(a, 100);
  add(steps.weight(), 100);
  add({901, 0x91000000}, 1);  // never launched, used longer ago
  policy.order(blocks);
  std::vector<std::uintptr_t> expected{steps.weight().address};
  for (const ScheduledBlock& a : activation) expected.push_back(a.address);
  expected.push_back(0x91000000);
  expected.push_back(0x90000000);
  EXPECT_EQ(addresses(blocks), expected);
}

TEST(EvictionPolicy, FurthestNextUseKeepsTheCallersOrderBeforeAStepIsKnown) {
  LaunchSchedule schedule;
  const FurthestNextUse policy(schedule);
  std::vector<RankedBlock> blocks = {{0x1000, 0, 4, 1, 0, 1}, {0x2000, 0, 4, 1, 1, 2}, {0x3000, 0, 2, 1, 2, 3}};
  policy.order(blocks);
  // Nothing is predicted: least recently used first, ties as given.
  EXPECT_EQ(addresses(blocks), (std::vector<std::uintptr_t>{0x3000, 0x1000, 0x2000}));
}

}  // namespace
}  // namespace tidepool::residency
