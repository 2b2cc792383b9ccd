// Specification of step detection (tools/replay/steps.hpp): synthetic traces
// with known steps, traces without any, and the recorded training traces.
#include "steps.hpp"

#include <gtest/gtest.h>

#include "replay.hpp"
#include "synthetic_trace.hpp"

namespace tidepool::replay {
namespace {

using testing::random_sizes;
using testing::TraceBuilder;

std::vector<std::uint64_t> sizes_in(const std::vector<TraceEvent>& events, const Step& step) {
  std::vector<std::uint64_t> sizes;
  for (std::size_t i = step.begin; i < step.end; ++i) {
    if (events[i].action == TraceAction::allocate) sizes.push_back(events[i].size);
  }
  return sizes;
}

// The steps tile the trace, and every step but the first begins with an allocation.
void expect_tiling(const std::vector<TraceEvent>& events, const std::vector<Step>& steps) {
  ASSERT_FALSE(steps.empty());
  EXPECT_EQ(steps.front().begin, 0u);
  EXPECT_EQ(steps.back().end, events.size());
  for (std::size_t i = 0; i + 1 < steps.size(); ++i) {
    EXPECT_EQ(steps[i].end, steps[i + 1].begin) << i;
    EXPECT_LT(steps[i].begin, steps[i].end) << i;
    EXPECT_EQ(events[steps[i + 1].begin].action, TraceAction::allocate) << i + 1;
  }
}

TEST(ReplaySteps, ThreeIdenticalStepsAfterASetup) {
  TraceBuilder t;
  for (std::uint64_t s : random_sizes(25, 1)) t.allocate(s);  // parameters, live throughout
  const auto step = random_sizes(40, 2);
  std::vector<std::size_t> firsts;
  for (int i = 0; i < 3; ++i) {
    firsts.push_back(t.events().size());
    t.step(step);
  }
  const auto steps = detect_steps(t.events());
  expect_tiling(t.events(), steps);
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_EQ(steps[0].end, firsts[0]);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(steps[i + 1].begin, firsts[i]);
    EXPECT_EQ(sizes_in(t.events(), steps[i + 1]), step);
  }
}

TEST(ReplaySteps, FourIdenticalStepsAreFourNotTwoOfDoubleLength) {
  TraceBuilder t;
  const auto step = random_sizes(30, 3);
  for (int i = 0; i < 4; ++i) t.step(step);
  const auto steps = detect_steps(t.events());
  expect_tiling(t.events(), steps);
  ASSERT_EQ(steps.size(), 4u);  // no setup: no empty first entry
  for (const Step& s : steps) EXPECT_EQ(sizes_in(t.events(), s), step);
}

TEST(ReplaySteps, AFirstStepThatDiffersJoinsTheSetup) {
  TraceBuilder t;
  for (std::uint64_t s : random_sizes(10, 4)) t.allocate(s);
  auto step = random_sizes(50, 5);
  auto first = step;
  first.insert(first.begin() + 20, 12345);  // e.g. optimizer state created once
  t.step(first);
  const std::size_t second = t.events().size();
  t.step(step);
  t.step(step);
  const auto steps = detect_steps(t.events());
  expect_tiling(t.events(), steps);
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[1].begin, second);
}

TEST(ReplaySteps, NoRepetitionIsOneStep) {
  TraceBuilder t;
  t.step(random_sizes(500, 6));
  const auto steps = detect_steps(t.events());
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].begin, 0u);
  EXPECT_EQ(steps[0].end, t.events().size());
}

TEST(ReplaySteps, ATrailingRunOfEqualSizesIsNotAStep) {
  TraceBuilder t;
  t.step(random_sizes(300, 7));
  t.step(std::vector<std::uint64_t>(64, 4096));
  EXPECT_EQ(detect_steps(t.events()).size(), 1u);
  // A short loop at the end is not a step either.
  TraceBuilder u;
  u.step(random_sizes(300, 8));
  for (int i = 0; i < 6; ++i) u.step({512, 1024, 2048});
  EXPECT_EQ(detect_steps(u.events()).size(), 1u);
}

TEST(ReplaySteps, EmptyAndTinyTracesAreOneStep) {
  EXPECT_EQ(detect_steps({}).size(), 1u);
  EXPECT_EQ(split_steps({}, 3).size(), 1u);
  TraceBuilder t;
  t.step({1, 2, 1, 2});
  EXPECT_EQ(detect_steps(t.events()).size(), 1u);
}

TEST(ReplaySteps, SplitGivesEqualAllocationCountsEndingAtTheEnd) {
  TraceBuilder t;
  t.step(random_sizes(100, 9));
  auto steps = split_steps(t.events(), 4);
  expect_tiling(t.events(), steps);
  ASSERT_EQ(steps.size(), 4u);
  for (const Step& s : steps) EXPECT_EQ(sizes_in(t.events(), s).size(), 25u);

  steps = split_steps(t.events(), 3);  // 33 each, and one allocation before them
  expect_tiling(t.events(), steps);
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_EQ(sizes_in(t.events(), steps[0]).size(), 1u);
  for (std::size_t i = 1; i < 4; ++i) EXPECT_EQ(sizes_in(t.events(), steps[i]).size(), 33u);

  EXPECT_EQ(split_steps(t.events(), 1).size(), 1u);
  EXPECT_EQ(split_steps(t.events(), 0).size(), 1u);
  EXPECT_EQ(split_steps(t.events(), 1000).size(), 100u);  // one allocation each
}

TEST(ReplaySteps, EveryRecordedTrainingTraceHasRepeatedSteps) {
  for (const char* name : {"resnet50_b16.csv.gz", "mobilenet_v2_b32.csv.gz", "seq2seq_b32.csv.gz"}) {
    std::vector<TraceEvent> events;
    std::string error;
    ASSERT_TRUE(load_trace(std::string(TIDEPOOL_TRACES_DIR) + "/" + name, &events, &error)) << error;
    const auto steps = detect_steps(events);
    expect_tiling(events, steps);
    ASSERT_GE(steps.size(), 3u) << name;
    const auto last = sizes_in(events, steps[steps.size() - 1]);
    EXPECT_GE(last.size(), 8u) << name;
    EXPECT_EQ(sizes_in(events, steps[steps.size() - 2]), last) << name;
  }
}

}  // namespace
}  // namespace tidepool::replay
