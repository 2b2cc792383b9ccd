// ThreadCounts: every add counted exactly, from any number of threads,
// including the threads past the slots of their own (which share one).
#include "util/thread_counts.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <latch>
#include <memory>
#include <thread>
#include <vector>

namespace tidepool::util {
namespace {

TEST(ThreadCounts, AThreadsAddsAreCountedPerCounter) {
  ThreadCounts<2> counts;
  auto mine = counts.mine();
  for (int i = 0; i < 5; ++i) mine.add(0);
  mine.add(1);
  EXPECT_EQ(counts.total(0), 5U);
  EXPECT_EQ(counts.total(1), 1U);
}

TEST(ThreadCounts, ManyThreadsAtOnceLoseNoAddEvenPastTheirOwnSlots) {
  // More threads than own slots: the last ones share a slot, and add to it
  // at the same time as each other.
  auto counts = std::make_unique<ThreadCounts<2>>();
  constexpr std::size_t kThreads = ThreadCounts<2>::kOwnSlots + 24;
  constexpr std::uint64_t kAdds = 20000;
  // Every thread starts adding at once, so that those sharing a slot add
  // to it together.
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (std::size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&counts, &start] {
      start.arrive_and_wait();
      for (std::uint64_t i = 0; i < kAdds; ++i) {
        auto mine = counts->mine();
        mine.add(0);
        if (i % 2 == 0) mine.add(1);
      }
    });
  }
  // Read while they add: a sum of what was added so far, never more.
  EXPECT_LE(counts->total(0), kThreads * kAdds);
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(counts->total(0), kThreads * kAdds);
  EXPECT_EQ(counts->total(1), kThreads * kAdds / 2);
}

TEST(ThreadCounts, AnExitedThreadsCountsStay) {
  ThreadCounts<1> counts;
  std::thread([&counts] {
    auto mine = counts.mine();
    for (int i = 0; i < 7; ++i) mine.add(0);
  }).join();
  EXPECT_EQ(counts.total(0), 7U);
}

}  // namespace
}  // namespace tidepool::util
