// Specification of the sim's virtual clock (sim/clock.cpp): kernels that hold
// their stream for virtual time, host looks that see one moment of it, and
// host waits that move it, so that a tool modelling a lagging device gets the
// same answers on every run.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <set>
#include <vector>

#include "sim/sim_control.h"
#include "support/sim_driver.hpp"

namespace tidepool {
namespace {

using testing::sim_control;
using testing::sim_driver;

const driver::Api& api() { return sim_driver().api(); }

void set_clock(int on) { sim_control<decltype(&tidepool_sim_set_virtual_clock)>("tidepool_sim_set_virtual_clock")(on); }
void advance(std::uint64_t ns) { sim_control<decltype(&tidepool_sim_advance_clock)>("tidepool_sim_advance_clock")(ns); }
std::uint64_t clock_ns() { return sim_control<decltype(&tidepool_sim_clock_ns)>("tidepool_sim_clock_ns")(); }
CUresult run_for(std::uint64_t ns) { return sim_control<decltype(&tidepool_sim_run_for)>("tidepool_sim_run_for")(ns); }

// A kernel that holds its stream for its one argument's nanoseconds.
void hold(void** params, void* /*user*/) { (void)run_for(*static_cast<std::uint64_t*>(params[0])); }

CUfunction hold_kernel() {
  static CUfunction f = [] {
    CUfunction fn = nullptr;
    const std::size_t sizes[] = {sizeof(std::uint64_t)};
    auto reg = sim_control<decltype(&tidepool_sim_register_kernel)>("tidepool_sim_register_kernel");
    EXPECT_EQ(reg(&fn, &hold, nullptr, 1, sizes), CUDA_SUCCESS);
    return fn;
  }();
  return f;
}

class SimClock : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(api().init(0), CUDA_SUCCESS);
    ASSERT_EQ(api().devicePrimaryCtxRetain(&context_, 0), CUDA_SUCCESS);
    ASSERT_EQ(api().ctxSetCurrent(context_), CUDA_SUCCESS);
    set_clock(1);
    start_ = clock_ns();
  }
  void TearDown() override {
    // Work still held by the clock runs out first, moving it, before its
    // streams go and the process ends under it.
    EXPECT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
    for (CUevent e : events_) api().eventDestroy(e);
    for (CUstream s : streams_) api().streamDestroy(s);
    set_clock(0);
    sim_control<void (*)(std::size_t)>("tidepool_sim_set_queue_depth")(1024);
    api().devicePrimaryCtxRelease(0);
  }
  CUstream stream() {
    CUstream s = nullptr;
    EXPECT_EQ(api().streamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    streams_.push_back(s);
    return s;
  }
  static void launch_hold(CUstream s, std::uint64_t ns) {
    void* params[] = {&ns};
    ASSERT_EQ(api().launchKernel(hold_kernel(), 1, 1, 1, 1, 1, 1, 0, s, params, nullptr), CUDA_SUCCESS);
  }
  CUevent record(CUstream s) {
    CUevent e = nullptr;
    EXPECT_EQ(api().eventCreate(&e, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
    EXPECT_EQ(api().eventRecord(e, s), CUDA_SUCCESS);
    events_.push_back(e);
    return e;
  }
  // Nanoseconds of the clock since the test began.
  std::uint64_t elapsed() const { return clock_ns() - start_; }

  CUcontext context_ = nullptr;
  std::uint64_t start_ = 0;
  std::vector<CUstream> streams_;
  std::vector<CUevent> events_;
};

TEST_F(SimClock, AKernelHoldsItsStreamUntilTheClockReachesItsEnd) {
  CUstream s = stream();
  launch_hold(s, 10'000);
  CUevent done = record(s);
  // However long the host takes, the device has not moved.
  EXPECT_EQ(api().eventQuery(done), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(api().streamQuery(s), CUDA_ERROR_NOT_READY);
  advance(9'999);
  EXPECT_EQ(api().eventQuery(done), CUDA_ERROR_NOT_READY);
  advance(1);
  EXPECT_EQ(api().eventQuery(done), CUDA_SUCCESS);
  EXPECT_EQ(api().streamQuery(s), CUDA_SUCCESS);
}

TEST_F(SimClock, WorkOnAStreamRunsInTurnAndNoEarlierThanItWasQueued) {
  CUstream s = stream();
  launch_hold(s, 10'000);
  launch_hold(s, 10'000);  // starts when the first ends, at 10 us
  CUevent second = record(s);
  advance(15'000);
  EXPECT_EQ(api().eventQuery(second), CUDA_ERROR_NOT_READY);
  advance(5'000);
  EXPECT_EQ(api().eventQuery(second), CUDA_SUCCESS);
  // The stream was idle from 20 us: work queued at 30 us runs from 30 us.
  advance(10'000);
  launch_hold(s, 10'000);
  CUevent third = record(s);
  advance(9'000);
  EXPECT_EQ(api().eventQuery(third), CUDA_ERROR_NOT_READY);
  advance(1'000);
  EXPECT_EQ(api().eventQuery(third), CUDA_SUCCESS);
}

TEST_F(SimClock, StreamsRunSideBySide) {
  CUstream a = stream();
  CUstream b = stream();
  launch_hold(a, 10'000);
  launch_hold(b, 4'000);
  CUevent a_done = record(a);
  CUevent b_done = record(b);
  advance(4'000);
  EXPECT_EQ(api().eventQuery(b_done), CUDA_SUCCESS);
  EXPECT_EQ(api().eventQuery(a_done), CUDA_ERROR_NOT_READY);
}

TEST_F(SimClock, AHostWaitMovesTheClockToWhenTheWorkIsDone) {
  CUstream s = stream();
  launch_hold(s, 7'000);
  launch_hold(s, 5'000);
  ASSERT_EQ(api().streamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(elapsed(), 12'000U);
  CUstream other = stream();
  launch_hold(other, 3'000);
  CUevent e = record(other);
  ASSERT_EQ(api().eventSynchronize(e), CUDA_SUCCESS);
  EXPECT_EQ(elapsed(), 15'000U);
  launch_hold(s, 2'000);
  launch_hold(other, 6'000);
  ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(elapsed(), 21'000U);
}

TEST_F(SimClock, AStreamWaitingOnAnotherRunsOnWhenThatWorkIsDone) {
  CUstream a = stream();
  CUstream b = stream();
  launch_hold(a, 10'000);
  CUevent a_done = record(a);
  ASSERT_EQ(api().streamWaitEvent(b, a_done, 0), CUDA_SUCCESS);
  launch_hold(b, 5'000);
  CUevent b_done = record(b);
  advance(9'000);
  EXPECT_EQ(api().eventQuery(b_done), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(api().eventSynchronize(b_done), CUDA_SUCCESS);
  EXPECT_EQ(elapsed(), 15'000U);  // b's kernel ran from when a's ended
}

TEST_F(SimClock, AWaitOnWorkLongDoneCostsNoTime) {
  CUstream a = stream();
  CUstream b = stream();
  launch_hold(a, 2'000);
  CUevent a_done = record(a);
  launch_hold(b, 10'000);
  ASSERT_EQ(api().streamWaitEvent(b, a_done, 0), CUDA_SUCCESS);
  launch_hold(b, 5'000);  // from 10 us, when b's own first kernel ends
  CUevent b_done = record(b);
  advance(12'000);  // one step past both a's end and b's first
  EXPECT_EQ(api().eventQuery(b_done), CUDA_ERROR_NOT_READY);
  advance(3'000);
  EXPECT_EQ(api().eventQuery(b_done), CUDA_SUCCESS);
}

TEST_F(SimClock, AStreamWaitingOnAnotherRunsOnFromItsEndWhicheverThreadGetsThereFirst) {
  // One move of the clock ends a kernel on each stream; the waiting stream's
  // next kernel starts when the work it waits for ended, however the two
  // workers are scheduled.
  for (int run = 0; run < 50; ++run) {
    const std::uint64_t begin = clock_ns();
    CUstream a = stream();
    CUstream b = stream();
    launch_hold(a, 10'000);
    CUevent a_done = record(a);
    launch_hold(b, 8'000);
    ASSERT_EQ(api().streamWaitEvent(b, a_done, 0), CUDA_SUCCESS);
    launch_hold(b, 5'000);
    CUevent b_done = record(b);
    advance(12'000);
    ASSERT_EQ(api().eventQuery(b_done), CUDA_ERROR_NOT_READY) << "run " << run;
    advance(2'999);
    ASSERT_EQ(api().eventQuery(b_done), CUDA_ERROR_NOT_READY) << "run " << run;
    advance(1);
    ASSERT_EQ(api().eventQuery(b_done), CUDA_SUCCESS) << "run " << run;
    ASSERT_EQ(clock_ns() - begin, 15'000U);
  }
}

TEST_F(SimClock, AFullQueueMakesTheHostWaitOnTheClock) {
  sim_control<void (*)(std::size_t)>("tidepool_sim_set_queue_depth")(2);
  CUstream s = stream();
  launch_hold(s, 10'000);  // runs
  launch_hold(s, 10'000);  // queued
  launch_hold(s, 10'000);  // queued: the queue is full
  EXPECT_EQ(elapsed(), 0U);
  launch_hold(s, 10'000);  // room only once the first is done
  EXPECT_EQ(elapsed(), 10'000U);
}

TEST_F(SimClock, TheSameProgramSeesTheSameAnswersOnEveryRun) {
  // A host that looks between launches on three streams: what it sees is a
  // function of the clock alone.
  std::set<std::vector<int>> seen;
  for (int run = 0; run < 20; ++run) {
    CUstream streams[] = {stream(), stream(), stream()};
    std::vector<CUevent> fences;
    std::vector<int> answers;
    for (int i = 0; i < 60; ++i) {
      CUstream s = streams[i % 3];
      launch_hold(s, 1'000 + 700 * static_cast<std::uint64_t>(i % 5));
      fences.push_back(record(s));
      advance(900);
      for (CUevent f : fences) answers.push_back(api().eventQuery(f) == CUDA_SUCCESS ? 1 : 0);
    }
    ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
    seen.insert(answers);
  }
  EXPECT_EQ(seen.size(), 1U);
}

TEST_F(SimClock, RunForOutsideAStreamsWorkIsRefusedAndOffItSpins) {
  EXPECT_EQ(run_for(1'000), CUDA_ERROR_INVALID_CONTEXT);
  set_clock(0);
  const std::uint64_t before = clock_ns();
  CUstream s = stream();
  const auto started = std::chrono::steady_clock::now();
  launch_hold(s, 1'000'000);  // a millisecond of wall time
  CUevent e = record(s);
  ASSERT_EQ(api().eventSynchronize(e), CUDA_SUCCESS);
  EXPECT_GE(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(1));  // from below only
  EXPECT_EQ(clock_ns(), before);  // the clock did not move: off, waits are real
}

}  // namespace
}  // namespace tidepool
