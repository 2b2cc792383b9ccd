// LaunchSchedule: the period of a training-like launch sequence, the
// blocks of this step tied to last step's, and the predictions made from it.
#include "residency/launch_schedule.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "residency/training_steps.hpp"

namespace tidepool::residency {
namespace {

using training::Steps;

TEST(LaunchSchedule, FindsTheStepOfARepeatingSequenceOfOneKernel) {
  LaunchSchedule s;
  Steps steps(10);
  (void)steps.step(s);
  EXPECT_EQ(s.period(), 0u) << "one step is not a repetition";
  (void)steps.step(s);
  (void)steps.step(s);
  EXPECT_EQ(s.period(), 20u);
  // The report's learned_candidates: the step among the periods tried,
  // matched for at least a whole step.
  const auto tried = s.candidates();
  EXPECT_TRUE(std::any_of(tried.begin(), tried.end(), [](const auto& c) { return c.first == 20 && c.second >= 20; }));
}

TEST(LaunchSchedule, PredictsTheBackwardUseOfEachActivationAndTheWeightsNextStep) {
  LaunchSchedule s;
  Steps steps(8);
  (void)steps.step(s);
  (void)steps.step(s);
  const std::vector<std::uint64_t> backward = steps.step(s);
  ASSERT_EQ(s.period(), 16u);
  // Replay the forward half of a fourth step and ask about its activations.
  Steps probe = steps;
  LaunchSchedule copy = s;
  std::vector<ScheduledBlock> activation;
  for (int i = 0; i < 8; ++i) {
    activation.push_back(probe.fresh());
    std::vector<ScheduledBlock> named{probe.weight(), activation.back()};
    if (i > 0) named.insert(named.begin(), activation[static_cast<std::size_t>(i - 1)]);
    copy.record(0x4242, named.data(), named.size());
  }
  for (int i = 0; i < 8; ++i) {
    // Step 3's backward layer i ran at backward[i]; step 4's comes a period later.
    EXPECT_EQ(copy.next_use(activation[static_cast<std::size_t>(i)].id), backward[static_cast<std::size_t>(i)] + 16)
        << "activation " << i;
  }
  // The weight is next read by the first forward layer of the next step.
  EXPECT_EQ(copy.next_use(probe.weight().id), 4 * 16u);
  // The activation needed first in the backward pass is the last one, and it
  // is the one upcoming() names for the next launch.
  std::vector<ScheduledBlock> next;
  copy.upcoming(1, &next);
  ASSERT_FALSE(next.empty());
  EXPECT_EQ(next.front().id, activation.back().id);
  copy.upcoming(3, &next);
  const bool names_layer_6 = std::any_of(next.begin(), next.end(), [&](const ScheduledBlock& b) {
    return b.id == activation[6].id && b.address == activation[6].address;
  });
  EXPECT_TRUE(names_layer_6) << "three launches ahead reach backward layer 6";
}

TEST(LaunchSchedule, DemandSeenLastStepIsPredictedAtTheSamePlace) {
  LaunchSchedule s;
  Steps steps(8);
  for (int k = 0; k < 3; ++k) (void)steps.step(s);
  ASSERT_EQ(s.period(), 16u);
  // This step, an allocation asks for 5 pages after the 4th launch.
  (void)steps.step(s, [&](int k) {
    if (k == 3) s.note_demand(5);
  });
  // Next step: before its 4th launch's allocations, the demand is ahead.
  std::size_t before = 0;
  std::size_t at_third = 0;
  std::size_t after = 0;
  (void)steps.step(s, [&](int k) {
    if (k == 0) before = s.predicted_demand(2);
    if (k == 2) at_third = s.predicted_demand(2);
    if (k == 4) after = s.predicted_demand(2);
  });
  EXPECT_EQ(before, 0u) << "three launches away is beyond two ahead";
  EXPECT_EQ(at_third, 5u);
  EXPECT_EQ(after, 0u) << "the demand's place has passed";
}

TEST(LaunchSchedule, ANonRepeatingProgramFindsNoPeriodAndStaysBounded) {
  LaunchSchedule s(256);
  for (std::uint64_t i = 0; i < 20000; ++i) {
    ScheduledBlock b{i + 1, 0x1000 * (i + 1)};
    s.record(0x1000 + (i * 7919) % 100003, &b, 1);
  }
  EXPECT_EQ(s.period(), 0u);
  for (const auto& [period, run] : s.candidates()) {
    if (period != 0) {
      EXPECT_LT(run, period) << "no period tried has matched a whole one";
    }
  }
  EXPECT_EQ(s.next_use(5), LaunchSchedule::kUnknown);
  std::vector<ScheduledBlock> next;
  s.upcoming(8, &next);
  EXPECT_TRUE(next.empty());
}

}  // namespace
}  // namespace tidepool::residency
