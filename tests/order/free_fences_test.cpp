// Specification of order::FreeFences: a free comes back only once the work
// queued before it has finished on every stream of the context (here, a held
// kernel on a non-blocking stream), in order; a fence the events cannot
// prove (an incomplete registry) is proven only by a context
// synchronisation, which is never made while a stream captures.
#include <gtest/gtest.h>

#include <memory>

#include "order/order.hpp"
#include "support/sim_driver.hpp"
#include "support/sim_kernels.hpp"

namespace tidepool::order {
namespace {

class FreeFencesTest : public testing::WithPrimaryContext {
 protected:
  static const driver::Api& api() { return testing::sim_driver().api(); }
  void SetUp() override {
    WithPrimaryContext::SetUp();
    ASSERT_EQ(api().streamCreate(&side_, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    registry_.created(side_);
  }
  void TearDown() override {
    (void)api().ctxSynchronize();
    (void)registry_.destroying(side_);
    (void)api().streamDestroy(side_);
    events_.clear();
    WithPrimaryContext::TearDown();
  }
  StreamRegistry registry_{api()};
  EventCache events_{api()};
  CUstream side_ = nullptr;
};

TEST_F(FreeFencesTest, AFreeComesBackOnlyAfterWorkOnANonBlockingStreamQueuedBeforeIt) {
  registry_.set_complete(true);
  FreeFences fences(api(), context_, registry_, events_);
  testing::Gate gate;
  int cell = 0;
  ASSERT_EQ(testing::launch_gated_write(side_, &gate, &cell, 1), CUDA_SUCCESS);
  fences.added();
  fences.added();
  fences.close_batch();
  EXPECT_EQ(fences.held(), 2u);
  EXPECT_TRUE(fences.may_finish_unaided());
  EXPECT_EQ(fences.take_finished(FreeFences::Wait::none), 0u) << "the side stream's work is still held";
  // A free after the fence joins the next one.
  fences.added();
  gate.release();
  EXPECT_EQ(fences.take_finished(FreeFences::Wait::everything), 3u);
  EXPECT_EQ(cell, 1);
  EXPECT_EQ(fences.held(), 0u);
  EXPECT_EQ(fences.take_finished(FreeFences::Wait::none), 0u);
}

TEST_F(FreeFencesTest, WithoutACompleteRegistryOnlyASynchronisationProvesAFenceAndNeverDuringACapture) {
  registry_.set_complete(false);
  FreeFences fences(api(), context_, registry_, events_);
  fences.added();
  fences.close_batch();
  EXPECT_FALSE(fences.may_finish_unaided());
  EXPECT_EQ(fences.take_finished(FreeFences::Wait::none), 0u);
  auto set_capturing = testing::sim_control<decltype(&tidepool_sim_set_capturing)>("tidepool_sim_set_capturing");
  set_capturing(side_, 1);
  EXPECT_TRUE(fences.capture_in_progress());
  EXPECT_EQ(fences.take_finished(FreeFences::Wait::everything), 0u) << "a synchronisation would end the capture";
  set_capturing(side_, 0);
  EXPECT_EQ(fences.take_finished(FreeFences::Wait::everything), 1u);
}

TEST_F(FreeFencesTest, TakeAllForgetsEveryFreeAndGivesTheEventsBack) {
  registry_.set_complete(true);
  FreeFences fences(api(), context_, registry_, events_);
  testing::Gate gate;
  int cell = 0;
  ASSERT_EQ(testing::launch_gated_write(side_, &gate, &cell, 1), CUDA_SUCCESS);
  for (int i = 0; i < 4; ++i) fences.added();
  fences.close_batch();
  fences.take_all();
  EXPECT_EQ(fences.held(), 0u);
  EXPECT_EQ(fences.take_finished(FreeFences::Wait::none), 0u);
  // Its two events (the legacy stream's and the side stream's) are spare
  // again: taking two creates none.
  auto calls = testing::sim_control<decltype(&tidepool_sim_call_count)>("tidepool_sim_call_count");
  const auto created = calls("cuEventCreate");
  CUevent a = events_.take();
  CUevent b = events_.take();
  EXPECT_NE(a, nullptr);
  EXPECT_NE(b, nullptr);
  EXPECT_EQ(calls("cuEventCreate"), created);
  events_.give_back(a);
  events_.give_back(b);
  gate.release();
  ASSERT_EQ(api().streamSynchronize(side_), CUDA_SUCCESS);  // the kernel writes `cell`, on this frame
  EXPECT_EQ(cell, 1);
}

}  // namespace
}  // namespace tidepool::order
