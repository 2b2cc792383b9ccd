// Specification of order::StreamFences: a stream handle is checked once, a
// free's epoch is known finished only from an event that finished after it
// (never from a call that failed, never while the stream's work is held),
// another stream is ordered after it without a host wait, and a context
// synchronisation settles every epoch but is never made during a capture.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>

#include "order/order.hpp"
#include "sim/sim_control.h"
#include "support/sim_driver.hpp"
#include "support/sim_kernels.hpp"
#include "support/stream_fences_fixture.hpp"

namespace tidepool::order {
namespace {

using StreamFencesTest = testing::WithStreamFences;

TEST_F(StreamFencesTest, AHandleIsCheckedOnceAndABogusOneIsRefused) {
  EXPECT_FALSE(fences_->cached(key_of(first_)));
  ASSERT_TRUE(fences_->check(key_of(first_)).ok());
  EXPECT_TRUE(fences_->cached(key_of(first_)));
  EXPECT_TRUE(fences_->met(key_of(first_)));
  EXPECT_FALSE(fences_->cached(key_of(second_)));
  const util::Status bogus = fences_->check(0xdead0);
  EXPECT_EQ(bogus.error(), util::Error::invalid_handle) << bogus.message();
  EXPECT_FALSE(fences_->met(0xdead0)) << "a refused handle leaves nothing behind";
  // A stream made behind the hooks' back joins the registry when first met.
  CUstream hidden = nullptr;
  ASSERT_EQ(api().streamCreate(&hidden, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  EXPECT_FALSE(registry_.alive(hidden));
  ASSERT_TRUE(fences_->check(key_of(hidden)).ok());
  EXPECT_TRUE(registry_.alive(hidden));
  fences_->forget(key_of(hidden));
  EXPECT_FALSE(fences_->met(key_of(hidden)));
  (void)registry_.destroying(hidden);
  (void)api().streamDestroy(hidden);
}

TEST_F(StreamFencesTest, AnEpochIsFinishedOnlyOnceTheStreamsWorkBeforeItHasRun) {
  ASSERT_TRUE(fences_->check(key_of(first_)).ok());
  testing::Gate gate;
  int cell = 0;
  ASSERT_EQ(testing::launch_gated_write(first_, &gate, &cell, 1), CUDA_SUCCESS);
  const std::uint64_t epoch = fences_->freed();
  EXPECT_TRUE(fences_->unsynchronized());
  EXPECT_FALSE(fences_->finished(key_of(first_), epoch)) << "nothing asked the driver yet";
  EXPECT_FALSE(fences_->query(key_of(first_), epoch, kNoPendingWork, false)) << "the held kernel still runs";
  EXPECT_FALSE(fences_->finished(key_of(first_), epoch));
  // Work on another stream says nothing of this one.
  EXPECT_TRUE(fences_->query(key_of(second_), epoch, key_of(second_), false)) << "idle: a wait ends at once";
  EXPECT_FALSE(fences_->finished(key_of(first_), epoch));
  gate.release();
  ASSERT_EQ(api().streamSynchronize(first_), CUDA_SUCCESS);
  EXPECT_TRUE(fences_->query(key_of(first_), epoch, kNoPendingWork, false));
  EXPECT_TRUE(fences_->finished(key_of(first_), epoch));
  EXPECT_EQ(cell, 1);
  // A later free is not covered by the earlier answer.
  const std::uint64_t later = fences_->freed();
  EXPECT_GT(later, epoch);
  EXPECT_FALSE(fences_->finished(key_of(first_), later));
}

TEST_F(StreamFencesTest, TheRequestersOwnStreamMayBeWaitedForAndNoOtherIs) {
  testing::Gate gate;
  int cell = 0;
  ASSERT_EQ(testing::launch_gated_write(first_, &gate, &cell, 1), CUDA_SUCCESS);
  const std::uint64_t epoch = fences_->freed();
  EXPECT_FALSE(fences_->query(key_of(first_), epoch, key_of(second_), false));
  // Released from another thread while the query waits on the host.
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    gate.release();
  });
  EXPECT_TRUE(fences_->query(key_of(first_), epoch, key_of(first_), false));
  releaser.join();
  EXPECT_EQ(cell, 1);
}

TEST_F(StreamFencesTest, AnotherStreamIsOrderedAfterTheFreeWithoutAHostWait) {
  testing::Gate gate;
  int cell = 0;
  ASSERT_EQ(testing::launch_gated_write(first_, &gate, &cell, 1), CUDA_SUCCESS);
  const std::uint64_t epoch = fences_->freed();
  bool had_to_wait = false;
  ASSERT_TRUE(fences_->order_after(key_of(first_), epoch, key_of(second_), /*ordered=*/true, &had_to_wait).ok());
  EXPECT_TRUE(had_to_wait);
  EXPECT_EQ(api().streamQuery(second_), CUDA_ERROR_NOT_READY) << "the second stream now waits for the first";
  gate.release();
  ASSERT_EQ(api().streamSynchronize(second_), CUDA_SUCCESS);
  EXPECT_EQ(cell, 1);
  // A cudaMalloc-style request waits on the host, and then the epoch is known finished.
  const std::uint64_t later = fences_->freed();
  ASSERT_TRUE(fences_->order_after(key_of(first_), later, key_of(second_), /*ordered=*/false, &had_to_wait).ok());
  EXPECT_TRUE(fences_->finished(key_of(first_), later));
}

TEST_F(StreamFencesTest, AFailedEventCallIsNeverReadAsFinished) {
  testing::Gate gate;
  int cell = 0;
  ASSERT_EQ(testing::launch_gated_write(first_, &gate, &cell, 1), CUDA_SUCCESS);
  const std::uint64_t epoch = fences_->freed();
  gate.release();
  ASSERT_EQ(api().streamSynchronize(first_), CUDA_SUCCESS);
  testing::sim_control<decltype(&tidepool_sim_inject_fault)>("tidepool_sim_inject_fault")("cuEventQuery", 1,
                                                                                          CUDA_ERROR_UNKNOWN);
  EXPECT_FALSE(fences_->query(key_of(first_), epoch, kNoPendingWork, false));
  EXPECT_FALSE(fences_->finished(key_of(first_), epoch));
  testing::sim_control<decltype(&tidepool_sim_clear_faults)>("tidepool_sim_clear_faults")();
  // Asked again, allowed to wait: the record made then answers.
  EXPECT_TRUE(fences_->query(key_of(first_), epoch, key_of(first_), false));
}

TEST_F(StreamFencesTest, ASynchronisationSettlesEveryEpochButNeverDuringACapture) {
  testing::Gate gate;
  int cell = 0;
  ASSERT_EQ(testing::launch_gated_write(first_, &gate, &cell, 1), CUDA_SUCCESS);
  const std::uint64_t a = fences_->freed();
  const std::uint64_t b = fences_->freed();
  EXPECT_FALSE(fences_->synchronize(/*capture_in_progress=*/true));
  EXPECT_TRUE(fences_->unsynchronized());
  EXPECT_FALSE(fences_->finished(key_of(first_), a));
  gate.release();
  EXPECT_TRUE(fences_->synchronize(false));
  EXPECT_FALSE(fences_->unsynchronized());
  EXPECT_TRUE(fences_->finished(key_of(first_), a));
  EXPECT_TRUE(fences_->finished(key_of(second_), b));
  EXPECT_EQ(cell, 1);
}

// Pages stay parked behind a barrier (kAfterBarrier) while the one record
// that answers questions at the tail of the queue is still in flight from an
// earlier question, so it cannot stand for them. The record made when they
// were parked answers later, with no wait for the work queued since; without
// it the answer would be a record made at the tail when asked, behind that
// newer work, and the host would wait for all of it.
TEST_F(StreamFencesTest, ABarrierThatPagesWereParkedBehindIsAnsweredLaterWithoutWaitingForNewerWork) {
  const auto count = [](const char* name) {
    return testing::sim_control<decltype(&tidepool_sim_call_count)>("tidepool_sim_call_count")(name);
  };
  int cell = 0;
  testing::Gate earlier;
  ASSERT_EQ(testing::launch_gated_write(nullptr, &earlier, &cell, 1), CUDA_SUCCESS);
  const std::uint64_t first = fences_->freed();
  EXPECT_FALSE(fences_->query(kAfterBarrier, first, kNoPendingWork, false)) << "a record at the tail, in flight";
  testing::Gate parked_work;
  ASSERT_EQ(testing::launch_gated_write(nullptr, &parked_work, &cell, 2), CUDA_SUCCESS);
  const std::uint64_t parked = fences_->freed();
  EXPECT_FALSE(fences_->query(kAfterBarrier, parked, kNoPendingWork, false)) << "the record in flight is older";
  const std::uint64_t records_before = count("cuEventRecord");
  fences_->parked_behind_barrier(parked);
  fences_->parked_behind_barrier(parked);
  fences_->parked_behind_barrier(first);
  EXPECT_EQ(count("cuEventRecord"), records_before + 1) << "one record answers for the barrier and those before it";
  earlier.release();
  parked_work.release();
  while (api().streamQuery(nullptr) == CUDA_ERROR_NOT_READY) std::this_thread::yield();
  testing::Gate newer;
  ASSERT_EQ(testing::launch_gated_write(nullptr, &newer, &cell, 3), CUDA_SUCCESS);
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    newer.release();
  });
  const std::uint64_t waits_before = count("cuEventSynchronize");
  EXPECT_TRUE(fences_->query(kAfterBarrier, parked, kAfterBarrier, /*wait_for_barrier=*/true));
  EXPECT_EQ(count("cuEventSynchronize"), waits_before)
      << "waited for the newer work to prove the parked pages' work done";
  opener.join();
  ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);  // before `cell` goes
  EXPECT_EQ(cell, 3);
}

}  // namespace
}  // namespace tidepool::order
