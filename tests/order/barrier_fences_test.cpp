// Specification: order::BarrierFences answers, for each recent device barrier, when
// the work queued before it has finished: never before (a failed record or
// query is never read as finished), and without waiting for work queued
// after it. Work is held back with gated sim kernels on the legacy stream,
// where the pool records behind its barriers.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>

#include "order/order.hpp"
#include "runtime/allocator.hpp"
#include "sim/sim_control.h"
#include "support/sim_driver.hpp"
#include "support/sim_kernels.hpp"

namespace tidepool {
namespace {

void inject_fault(const char* name, unsigned nth, CUresult result) {
  testing::sim_control<decltype(&tidepool_sim_inject_fault)>("tidepool_sim_inject_fault")(name, nth, result);
}
void clear_faults() { testing::sim_control<decltype(&tidepool_sim_clear_faults)>("tidepool_sim_clear_faults")(); }

class BarrierFencesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto created = runtime::Allocator::create(testing::sim_driver(), runtime::AllocatorOptions{});
    ASSERT_TRUE(created.ok()) << created.status().message();
    allocator_ = std::move(created.value());
    scope_ = std::make_unique<driver::ScopedContext>(api(), allocator_->context());
  }
  void TearDown() override {
    clear_faults();
    fences_.clear();
    (void)api().ctxSynchronize();
    events_.clear();
    scope_.reset();
    allocator_.reset();
  }
  static const driver::Api& api() { return testing::sim_driver().api(); }
  // Legacy-stream work that runs once `gate` opens.
  void hold(testing::Gate* gate) { ASSERT_EQ(testing::launch_gated_write(nullptr, gate, &sink_, 1), CUDA_SUCCESS); }

  std::unique_ptr<runtime::Allocator> allocator_;
  std::unique_ptr<driver::ScopedContext> scope_;
  order::EventCache events_{api()};
  order::BarrierFences fences_{api(), events_};
  int sink_ = 0;
};

TEST_F(BarrierFencesTest, AnswersForABarrierWhileWorkQueuedAfterItStillWaits) {
  testing::Gate before;
  testing::Gate after;
  hold(&before);
  fences_.recorded_barrier(1);
  hold(&after);
  fences_.recorded_barrier(2);
  EXPECT_EQ(fences_.finished_through(), 0u) << "the work before the first barrier has not run";
  before.release();
  // Waits for the first barrier's work only: the work after it is still
  // held, so waiting for it too would never return.
  EXPECT_EQ(fences_.finished_through(1), 1u);
  EXPECT_EQ(fences_.finished_through(), 1u) << "the second barrier's work is still held";
  after.release();
  EXPECT_EQ(fences_.finished_through(2), 2u);
}

TEST_F(BarrierFencesTest, AFailedQueryIsNeverReadAsFinished) {
  testing::Gate gate;
  hold(&gate);
  fences_.recorded_barrier(1);
  gate.release();
  ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
  inject_fault("cuEventQuery", 1, CUDA_ERROR_LAUNCH_FAILED);
  EXPECT_EQ(fences_.finished_through(), 0u);
  clear_faults();
  // The record that failed to answer is gone; a later barrier still answers.
  fences_.recorded_barrier(2);
  EXPECT_EQ(fences_.finished_through(2), 2u);
}

TEST_F(BarrierFencesTest, AFailedRecordLeavesNothingToWaitFor) {
  testing::Gate gate;
  hold(&gate);
  inject_fault("cuEventRecord", 1, CUDA_ERROR_LAUNCH_FAILED);
  fences_.recorded_barrier(1);
  clear_faults();
  // Nothing was recorded, so nothing is waited for (the gate is still shut)
  // and nothing is claimed finished.
  EXPECT_EQ(fences_.finished_through(1), 0u);
  gate.release();
  // The held kernel still uses the gate: it must finish before the gate goes.
  ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
}

// More barriers in flight than are kept: waiting for a dropped one waits
// for the next one kept, and for nothing after it.
TEST_F(BarrierFencesTest, WaitingForADroppedBarrierWaitsForTheNextOneKept) {
  testing::Gate first;
  testing::Gate rest;
  hold(&first);
  constexpr std::uint64_t kKept = order::BarrierFences::kKept;
  for (std::uint64_t epoch = 1; epoch <= kKept + 2; ++epoch) fences_.recorded_barrier(epoch);
  hold(&rest);
  fences_.recorded_barrier(kKept + 3);  // the ring keeps 4 .. kKept + 3: 1, 2 and 3 were dropped
  // Released while the host already waits: an answer before it would not
  // have waited. The work after barrier kKept + 2 stays held throughout, so
  // a wait for it would never return.
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    first.release();
  });
  // Barrier 1's record was dropped: 4's answers for it. The records after 4
  // are only queried, and may not have finished yet.
  const std::uint64_t answered = fences_.finished_through(1);
  EXPECT_GE(answered, 4u);
  EXPECT_LE(answered, kKept + 2) << "the held work's barrier cannot have finished";
  opener.join();
  rest.release();
  EXPECT_EQ(fences_.finished_through(kKept + 3), kKept + 3);
}

TEST_F(BarrierFencesTest, KeepsTheNewestBarriersWhenMoreAreInFlight) {
  testing::Gate gate;
  hold(&gate);
  constexpr std::uint64_t kBarriers = 3 * order::BarrierFences::kKept;
  for (std::uint64_t epoch = 1; epoch <= kBarriers; ++epoch) fences_.recorded_barrier(epoch);
  EXPECT_EQ(fences_.finished_through(), 0u);
  gate.release();
  EXPECT_EQ(fences_.finished_through(kBarriers), kBarriers);
}

}  // namespace
}  // namespace tidepool
