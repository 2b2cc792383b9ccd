// Specification of order::ContextFence: recorded behind the work queued on
// every stream of the context (the legacy stream's event covering the
// blocking streams, one event per non-blocking stream), it is passed only
// once that work is done; each gap that events cannot cover is named, and
// such a fence is never read as passed; a failed query leaves its events
// destroyed rather than reused.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "order/order.hpp"
#include "support/sim_driver.hpp"
#include "support/sim_kernels.hpp"

namespace tidepool::order {
namespace {

using Gap = ContextFence::Gap;

class ContextFenceTest : public testing::WithPrimaryContext {
 protected:
  static const driver::Api& api() { return testing::sim_driver().api(); }
  void SetUp() override {
    WithPrimaryContext::SetUp();
    ASSERT_EQ(api().streamCreate(&side_, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    ASSERT_EQ(api().streamCreate(&blocking_, CU_STREAM_DEFAULT), CUDA_SUCCESS);
    registry_.created(side_);
    registry_.created(blocking_);
    registry_.set_complete(true);
  }
  void TearDown() override {
    (void)api().ctxSynchronize();
    inject(nullptr);
    for (CUstream s : {side_, blocking_}) {
      (void)registry_.destroying(s);
      (void)api().streamDestroy(s);
    }
    events_.clear();
    WithPrimaryContext::TearDown();
  }
  static void inject(const char* name) {
    if (name == nullptr) {
      testing::sim_control<decltype(&tidepool_sim_clear_faults)>("tidepool_sim_clear_faults")();
      return;
    }
    testing::sim_control<decltype(&tidepool_sim_inject_fault)>("tidepool_sim_inject_fault")(name, 1,
                                                                                            CUDA_ERROR_UNKNOWN);
  }
  Gap record(ContextFence* fence, bool known_gap = false) {
    return fence->record(api(), events_, registry_, context_, &streams_, known_gap);
  }
  StreamRegistry registry_{api()};
  EventCache events_{api()};
  std::vector<CUstream> streams_;
  CUstream side_ = nullptr;
  CUstream blocking_ = nullptr;
};

TEST_F(ContextFenceTest, IsPassedOnlyOnceTheWorkQueuedBeforeItOnEveryStreamIsDone) {
  for (CUstream held : {side_, blocking_}) {
    SCOPED_TRACE(held == side_ ? "a non-blocking stream" : "a blocking stream, through the legacy stream");
    testing::Gate gate;
    int cell = 0;
    ASSERT_EQ(testing::launch_gated_write(held, &gate, &cell, 1), CUDA_SUCCESS);
    ContextFence fence;
    ASSERT_EQ(record(&fence), Gap::none);
    EXPECT_FALSE(fence.needs_sync());
    EXPECT_EQ(fence.query(api()), CUDA_ERROR_NOT_READY);
    EXPECT_FALSE(fence.finished(api(), false));
    gate.release();
    EXPECT_TRUE(fence.finished(api(), true));
    EXPECT_EQ(fence.query(api()), CUDA_SUCCESS);
    EXPECT_EQ(cell, 1);
    fence.release(api(), events_);
  }
}

TEST_F(ContextFenceTest, AFenceEventsCannotProveNamesItsGapAndIsNeverReadAsPassed) {
  auto set_capturing = testing::sim_control<decltype(&tidepool_sim_set_capturing)>("tidepool_sim_set_capturing");
  struct Case {
    const char* why;
    Gap gap;
  };
  for (const Case c : {Case{"known", Gap::unseen}, Case{"incomplete registry", Gap::unseen},
                       Case{"capturing", Gap::capturing}, Case{"failed record", Gap::failed}}) {
    SCOPED_TRACE(c.why);
    const std::string why = c.why;
    if (why == "incomplete registry") registry_.set_complete(false);
    if (why == "capturing") set_capturing(side_, 1);
    if (why == "failed record") inject("cuEventRecord");
    ContextFence fence;
    EXPECT_EQ(record(&fence, why == "known"), c.gap);
    EXPECT_TRUE(fence.needs_sync());
    set_capturing(side_, 0);
    // Nothing is queued: only the gap keeps it unpassed.
    ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
    EXPECT_EQ(fence.query(api()), CUDA_ERROR_NOT_READY);
    EXPECT_FALSE(fence.finished(api(), true));
    fence.release(api(), events_);
    registry_.set_complete(true);
    inject(nullptr);
  }
}

TEST_F(ContextFenceTest, AFailedQueryLeavesTheFenceUnpassedAndItsEventsDestroyed) {
  ContextFence fence;
  ASSERT_EQ(record(&fence), Gap::none);
  inject("cuEventQuery");
  EXPECT_EQ(fence.query(api()), CUDA_ERROR_UNKNOWN);
  EXPECT_TRUE(fence.needs_sync());
  EXPECT_EQ(fence.query(api()), CUDA_ERROR_NOT_READY);
  auto calls = testing::sim_control<decltype(&tidepool_sim_call_count)>("tidepool_sim_call_count");
  const auto destroyed = calls("cuEventDestroy_v2");
  fence.release(api(), events_);
  EXPECT_EQ(calls("cuEventDestroy_v2") - destroyed, 2u) << "the legacy stream's event and the side stream's";
}

}  // namespace
}  // namespace tidepool::order
