// Step timing: from a trace's repeating allocations, and from marker lines.
#include "trial.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace tidepool::advise {
namespace {

std::string stamp(std::uint64_t us) {
  char text[32];
  std::snprintf(text, sizeof text, "%02llu:%02llu:%02llu:%06llu", static_cast<unsigned long long>(us / 3600000000),
                static_cast<unsigned long long>(us / 60000000 % 60), static_cast<unsigned long long>(us / 1000000 % 60),
                static_cast<unsigned long long>(us % 1000000));
  return text;
}

// Weights, then `steps` steps of `step_us` each: ten allocations (a step
// repeats at least eight, as replay's detection asks) freed in reverse.
std::string write_trace(int steps, std::uint64_t step_us) {
  // One file per process and shape: ctest runs these tests side by side.
  const std::string path =
      ::testing::TempDir() + "/advise_trial_steps_" + std::to_string(::getpid()) + "_" + std::to_string(steps) + ".csv";
  std::ofstream out(path);
  out << "Thread,Time,Action,Pointer,Size,Stream\n";
  std::uint64_t t = 1000;
  out << "0," << stamp(t) << ",allocate,0x100000,4096,0\n";
  for (int s = 0; s < steps; ++s) {
    const std::uint64_t begin = 5000 + static_cast<std::uint64_t>(s) * step_us;
    constexpr int kAllocations = 10;
    for (int i = 0; i < kAllocations; ++i) {
      out << "0," << stamp(begin + static_cast<std::uint64_t>(i) * 10) << ",allocate,0x" << std::hex
          << (0x200000 + i * 0x1000000) << std::dec << "," << ((i + 1) << 20) << ",0\n";
    }
    for (int i = kAllocations - 1; i >= 0; --i) {
      out << "0," << stamp(begin + 200 + static_cast<std::uint64_t>(kAllocations - i)) << ",free,0x" << std::hex
          << (0x200000 + i * 0x1000000) << std::dec << "," << ((i + 1) << 20) << ",0\n";
    }
  }
  return path;
}

TEST(AdviseTrial, TimesStepsFromTheTracesRepeatingAllocations) {
  StepTiming timing;
  std::string error;
  ASSERT_TRUE(time_steps_from_trace(write_trace(6, 25000), &timing, &error)) << error;
  EXPECT_GE(timing.steps, 4u);
  EXPECT_NEAR(timing.median_s, 0.025, 1e-6);
}

TEST(AdviseTrial, ATraceWithoutRepetitionHasNoSteps) {
  StepTiming timing;
  std::string error;
  ASSERT_TRUE(time_steps_from_trace(write_trace(1, 25000), &timing, &error)) << error;
  EXPECT_EQ(timing.median_s, 0);
}

TEST(AdviseTrial, AMissingTraceIsAnError) {
  StepTiming timing;
  std::string error;
  EXPECT_FALSE(time_steps_from_trace("/no/such/trace.csv", &timing, &error));
  EXPECT_FALSE(error.empty());
}

TEST(AdviseTrial, MarkerStepsAreTheMedianGapBetweenLines) {
  const StepTiming timing = time_steps_from_markers({1.0, 1.5, 1.7, 1.9, 2.1});
  EXPECT_EQ(timing.steps, 5u);
  EXPECT_NEAR(timing.median_s, 0.2, 1e-9);
  EXPECT_EQ(time_steps_from_markers({}).median_s, 0);
}

}  // namespace
}  // namespace tidepool::advise
