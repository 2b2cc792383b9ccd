// The advisor's search over fake trials: a program that fits up to a known
// batch without eviction and to another with it, at a known speed.
#include "search.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <set>

namespace tidepool::advise {
namespace {

class FakeProgram {
 public:
  FakeProgram(long fits_without, long fits_with) : fits_without_(fits_without), fits_with_(fits_with) {}

  const Trial& run(long batch, bool eviction) {
    EXPECT_TRUE(tried_.insert({batch, eviction}).second) << "batch " << batch << " tried twice";
    Trial& t = trials_.emplace_back();
    t.index = static_cast<int>(trials_.size());
    t.batch = batch;
    t.eviction = eviction;
    t.report_found = true;
    t.eviction_state = eviction ? eviction_state_ : "";
    if (batch == fail_at_) {
      t.outcome = Outcome::failed;
      t.reason = "exited with status 1 without running out of memory";
    } else if (batch > (eviction ? fits_with_ : fits_without_)) {
      t.outcome = batch == time_out_at_ ? Outcome::timed_out : Outcome::out_of_memory;
    } else {
      t.outcome = Outcome::fits;
      // Throughput rises with the batch, and falls once eviction has to move pages.
      const double speed = batch <= fits_without_
                               ? 100.0 * static_cast<double>(batch)
                               : 100.0 * static_cast<double>(fits_without_) - (batch - fits_without_);
      t.samples_per_s = speed;
      t.step_s = static_cast<double>(batch) / speed;
    }
    return t;
  }
  Answer search(long min, long max, bool eviction = true) {
    return search_batches({min, max, eviction}, [this](long b, bool e) -> const Trial& { return run(b, e); });
  }

  long fits_without_;
  long fits_with_;
  long fail_at_ = 0;
  long time_out_at_ = 0;
  std::string eviction_state_ = "on";
  std::deque<Trial> trials_;
  std::set<std::pair<long, bool>> tried_;
};

TEST(AdviseSearch, FindsTheLargestBatchWithAndWithoutEvictionExactly) {
  for (long without : {1L, 2L, 7L, 12L, 13L, 64L, 100L}) {
    for (long extra : {0L, 1L, 5L, 40L}) {
      FakeProgram program(without, without + extra);
      const Answer a = program.search(1, 256);
      EXPECT_EQ(a.largest_without_eviction, without) << without << "+" << extra;
      EXPECT_EQ(a.largest_with_eviction, std::min(256L, without + extra)) << without << "+" << extra;
      EXPECT_TRUE(a.eviction_searched);
      EXPECT_EQ(a.stopped_by, nullptr);
      ASSERT_NE(a.best, nullptr);
      EXPECT_EQ(a.best->batch, without);  // the speed peaks where eviction begins
    }
  }
}

TEST(AdviseSearch, DoublesThenBisectsSoTrialsGrowWithTheLogarithmOfTheRange) {
  FakeProgram program(300, 300);
  const Answer a = program.search(1, 4096, false);
  EXPECT_EQ(a.largest_without_eviction, 300);
  // 1, 2, ..., 512 (10 trials), then bisection of (256, 512): 8 more.
  EXPECT_LE(program.trials_.size(), 19u);
  EXPECT_EQ(a.eviction_note, "not searched (--no-evict)");
}

TEST(AdviseSearch, TheRangeBoundsEveryTrial) {
  FakeProgram program(1000, 1000);
  const Answer a = program.search(3, 40);
  EXPECT_EQ(a.largest_without_eviction, 40);
  for (const auto& t : program.trials_) {
    EXPECT_GE(t.batch, 3);
    EXPECT_LE(t.batch, 40);
  }
  EXPECT_FALSE(a.eviction_searched);  // the whole range fits without it
  EXPECT_EQ(a.largest_with_eviction, 40);
}

TEST(AdviseSearch, NothingFitsWhenTheSmallestBatchDoesNot) {
  FakeProgram program(4, 10);
  const Answer a = program.search(5, 100);
  EXPECT_EQ(a.largest_without_eviction, 0);
  EXPECT_EQ(a.largest_with_eviction, 10);
  FakeProgram hopeless(4, 4);
  const Answer b = hopeless.search(5, 100);
  EXPECT_EQ(b.largest_without_eviction, 0);
  EXPECT_EQ(b.largest_with_eviction, 0);
  EXPECT_EQ(b.best, nullptr);
}

TEST(AdviseSearch, AFailureOtherThanMemoryStopsTheSearch) {
  FakeProgram program(50, 90);
  program.fail_at_ = 16;
  const Answer a = program.search(1, 256);
  ASSERT_NE(a.stopped_by, nullptr);
  EXPECT_EQ(a.stopped_by->batch, 16);
  EXPECT_EQ(program.trials_.back().batch, 16);  // nothing after it
  EXPECT_EQ(a.largest_without_eviction, 8);
  EXPECT_FALSE(a.eviction_searched);
}

TEST(AdviseSearch, ATimedOutTrialDoesNotTrainButTheSearchGoesOn) {
  FakeProgram program(10, 20);
  program.time_out_at_ = 22;  // doubling with eviction, 11 then 22, lands on it
  const Answer a = program.search(1, 64);
  EXPECT_EQ(a.largest_with_eviction, 20);
  EXPECT_EQ(a.stopped_by, nullptr);
  EXPECT_TRUE(std::any_of(program.trials_.begin(), program.trials_.end(),
                          [](const Trial& t) { return t.outcome == Outcome::timed_out && t.batch == 22; }));
}

TEST(AdviseSearch, EvictionTheDeviceCannotDoStopsPhaseTwoWithAReason) {
  FakeProgram program(10, 40);
  program.eviction_state_ = "off";
  const Answer a = program.search(1, 64);
  EXPECT_EQ(a.largest_without_eviction, 10);
  EXPECT_EQ(a.largest_with_eviction, 0);  // no trial with eviction worked: no answer
  EXPECT_FALSE(a.eviction_searched);
  EXPECT_NE(a.eviction_note.find("not available"), std::string::npos);
  EXPECT_EQ(program.trials_.back().eviction, true);
  EXPECT_EQ(std::count_if(program.trials_.begin(), program.trials_.end(), [](const Trial& t) { return t.eviction; }),
            1);
}

TEST(AdviseSearch, LearningRateScalesLinearly) {
  EXPECT_DOUBLE_EQ(scaled_learning_rate(0.1, 256, 1024), 0.4);
  EXPECT_DOUBLE_EQ(scaled_learning_rate(0.1, 256, 64), 0.025);
}

}  // namespace
}  // namespace tidepool::advise
