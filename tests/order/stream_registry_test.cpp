// Specification of the order layer's small parts on the sim: stream keys
// (the legacy stream, a per-thread stream per thread), the event cache
// (reuse before creation), and the StreamRegistry (what a cudaFree fence
// must cover, retired streams' last events, and the device barrier ordering
// a non-blocking stream's later work after earlier work on another).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "order/order.hpp"
#include "support/sim_driver.hpp"
#include "support/sim_kernels.hpp"

namespace tidepool::order {
namespace {

// Two devices, for a registry over two contexts. Runs before main, before
// the sim reads its environment.
[[maybe_unused]] const bool kTwoDevices = [] {
  ::setenv("TIDEPOOL_SIM_DEVICES", "2", 0);
  return true;
}();

const driver::Api& api() { return testing::sim_driver().api(); }

// The sim's records (0), stream waits (1) and capture queries (2) made
// since the last look at each: what a barrier or a catch-up queued.
class BarrierCalls {
 public:
  std::uint64_t operator()(std::size_t i) {
    const std::uint64_t now = calls_(kNames[i]);
    const std::uint64_t made = now - seen_[i];
    seen_[i] = now;
    return made;
  }
  void mark() {
    for (std::size_t i = 0; i < seen_.size(); ++i) (void)(*this)(i);
  }

 private:
  static constexpr const char* kNames[] = {"cuEventRecord", "cuStreamWaitEvent", "cuStreamIsCapturing"};
  decltype(&tidepool_sim_call_count) calls_ =
      testing::sim_control<decltype(&tidepool_sim_call_count)>("tidepool_sim_call_count");
  std::array<std::uint64_t, 3> seen_{};
};

class OrderTest : public testing::WithPrimaryContext {
 protected:
  CUstream make_stream(unsigned flags) {
    CUstream s = nullptr;
    EXPECT_EQ(api().streamCreate(&s, flags), CUDA_SUCCESS);
    return s;
  }

  // `registry` as the preload sets it up (complete, following submissions),
  // with a non-blocking stream created through it.
  CUstream follow_with_a_stream(StreamRegistry& registry) {
    registry.set_complete(true);
    registry.follow_submissions();
    CUstream s = make_stream(CU_STREAM_NON_BLOCKING);
    registry.created(s);
    return s;
  }

  // A non-blocking stream created now writes 2 into `cell`: that write must
  // land after the one of 1 that `held` keeps queued on the legacy stream.
  // Releases `held`; the stream is destroyed again.
  void expect_a_new_stream_to_start_behind(StreamRegistry& registry, testing::Gate& held, int* cell) {
    CUstream newcomer = make_stream(CU_STREAM_NON_BLOCKING);
    registry.created(newcomer);
    EXPECT_FALSE(registry.legacy_only());
    testing::Gate open;
    open.release();
    ASSERT_EQ(testing::launch_gated_write(newcomer, &open, cell, 2), CUDA_SUCCESS);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(*cell, 0) << "the new stream's write overtook the legacy stream's older one";
    held.release();
    ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
    EXPECT_EQ(*cell, 2) << "the new stream's write must land last";
    EXPECT_TRUE(registry.destroying(newcomer));
    ASSERT_EQ(api().streamDestroy(newcomer), CUDA_SUCCESS);
  }
};

TEST(StreamKeys, TheLegacyStreamIsZeroAndEachThreadHasItsOwnPerThreadKey) {
  using namespace stream_keys;
  EXPECT_EQ(stream_key(reinterpret_cast<std::uintptr_t>(CU_STREAM_LEGACY)), 0u);
  const std::uintptr_t mine = stream_key(reinterpret_cast<std::uintptr_t>(CU_STREAM_PER_THREAD));
  EXPECT_EQ(mine, stream_key(reinterpret_cast<std::uintptr_t>(CU_STREAM_PER_THREAD))) << "stable within a thread";
  EXPECT_TRUE(is_per_thread_key(mine));
  std::uintptr_t theirs = 0;
  std::thread([&] { theirs = stream_key(reinterpret_cast<std::uintptr_t>(CU_STREAM_PER_THREAD)); }).join();
  EXPECT_NE(theirs, mine);
  EXPECT_TRUE(is_per_thread_key(theirs));
  // This thread can fence its own per-thread stream, not another thread's.
  EXPECT_EQ(fence_handle(mine), CU_STREAM_PER_THREAD);
  EXPECT_EQ(fence_handle(theirs), nullptr);
  EXPECT_EQ(fence_handle(kAfterBarrier), nullptr);
  // An ordinary handle is its own key, never mistaken for a special one.
  const auto handle = std::uintptr_t{0x7f0000001000};
  EXPECT_EQ(stream_key(handle), handle);
  EXPECT_FALSE(is_per_thread_key(handle));
  EXPECT_NE(handle, kNoPendingWork);
  EXPECT_NE(handle, kAfterBarrier);
}

TEST_F(OrderTest, TheEventCacheReusesWhatWasGivenBackBeforeCreatingMore) {
  auto creates = testing::sim_control<decltype(&tidepool_sim_call_count)>("tidepool_sim_call_count");
  EventCache cache(api());
  const auto before = creates("cuEventCreate");
  CUevent a = cache.take();
  CUevent b = cache.take();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a, b);
  EXPECT_EQ(creates("cuEventCreate"), before + 2);
  cache.give_back(a);
  cache.give_back(nullptr);  // ignored
  EXPECT_EQ(cache.take(), a);
  EXPECT_EQ(creates("cuEventCreate"), before + 2) << "a spare event is reused, not created";
  cache.give_back(a);
  cache.give_back(b);
  const auto destroys = creates("cuEventDestroy_v2");
  cache.clear();
  EXPECT_EQ(creates("cuEventDestroy_v2"), destroys + 2);
}

TEST_F(OrderTest, AFenceCoversLiveNonBlockingStreamsAndDestroyedOnesUntilTheirWorkEnds) {
  StreamRegistry registry(api());
  CUstream blocking = make_stream(CU_STREAM_DEFAULT);
  CUstream non_blocking = make_stream(CU_STREAM_NON_BLOCKING);
  CUstream doomed = make_stream(CU_STREAM_NON_BLOCKING);
  for (CUstream s : {blocking, non_blocking, doomed}) registry.created(s);
  registry.created(nullptr);  // ignored, as are the special handles
  registry.created(CU_STREAM_PER_THREAD);
  EXPECT_TRUE(registry.alive(non_blocking));
  EXPECT_FALSE(registry.alive(CU_STREAM_PER_THREAD));

  // `doomed` still has work queued when it is destroyed: its last event is
  // a fence target until that work is done.
  testing::Gate gate;
  int target = 0;
  ASSERT_EQ(testing::launch_gated_write(doomed, &gate, &target, 1), CUDA_SUCCESS);
  EXPECT_TRUE(registry.destroying(doomed));
  ASSERT_EQ(api().streamDestroy(doomed), CUDA_SUCCESS);
  EXPECT_FALSE(registry.alive(doomed));
  EXPECT_FALSE(registry.destroying(doomed)) << "destroying an unknown stream fences nothing";

  std::vector<CUstream> streams;
  std::vector<std::shared_ptr<RetiredStream>> retired;
  registry.fence_targets(context_, &streams, &retired);
  EXPECT_EQ(streams, std::vector<CUstream>{non_blocking}) << "blocking streams are covered by the legacy stream";
  ASSERT_EQ(retired.size(), 1u);
  EXPECT_TRUE(retired[0]->recorded());
  EXPECT_FALSE(retired[0]->finished()) << "its work is still held by the gate";

  gate.release();
  ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(target, 1);
  EXPECT_TRUE(retired[0]->finished());
  streams.clear();
  retired.clear();
  registry.fence_targets(context_, &streams, &retired);
  EXPECT_TRUE(retired.empty()) << "a finished retirement is dropped";
  for (CUstream s : {blocking, non_blocking}) {
    EXPECT_TRUE(registry.destroying(s));
    ASSERT_EQ(api().streamDestroy(s), CUDA_SUCCESS);
  }
}

// Work a non-blocking stream queues after a device barrier runs after work
// another non-blocking stream queued before it: the barrier, not the host,
// orders them.
TEST_F(OrderTest, ADeviceBarrierOrdersLaterWorkOnEveryStreamAfterEarlierWork) {
  StreamRegistry registry(api());
  CUstream first = make_stream(CU_STREAM_NON_BLOCKING);
  CUstream second = make_stream(CU_STREAM_NON_BLOCKING);
  registry.created(first);
  registry.created(second);
  EXPECT_EQ(registry.device_barrier(context_), StreamRegistry::BarrierKind::failed)
      << "an incomplete registry makes no barrier";
  registry.set_complete(true);

  testing::Gate early;
  testing::Gate late;
  late.release();
  int cell = 0;
  ASSERT_EQ(testing::launch_gated_write(first, &early, &cell, 1), CUDA_SUCCESS);
  ASSERT_EQ(registry.device_barrier(context_), StreamRegistry::BarrierKind::queued);
  ASSERT_EQ(testing::launch_gated_write(second, &late, &cell, 2), CUDA_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(cell, 0) << "the later write ran before the earlier one";
  early.release();
  ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(cell, 2) << "the later write must land last";

  // A stream created after the barrier waits for it too.
  testing::Gate held;
  ASSERT_EQ(testing::launch_gated_write(first, &held, &cell, 3), CUDA_SUCCESS);
  ASSERT_EQ(registry.device_barrier(context_), StreamRegistry::BarrierKind::queued);
  CUstream newcomer = make_stream(CU_STREAM_NON_BLOCKING);
  registry.created(newcomer);
  ASSERT_EQ(testing::launch_gated_write(newcomer, &late, &cell, 4), CUDA_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(cell, 2);
  held.release();
  ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(cell, 4);
  for (CUstream s : {first, second, newcomer}) {
    EXPECT_TRUE(registry.destroying(s));
    ASSERT_EQ(api().streamDestroy(s), CUDA_SUCCESS);
  }
}

// While all work is on the legacy stream, its order is the barrier: nothing
// is queued, not even a capture query. A non-blocking stream created later
// does not wait for the legacy stream, so it starts behind a record of the
// legacy stream's work so far, and barriers from then on are queued.
TEST_F(OrderTest, WhileAllWorkIsOnTheLegacyStreamItsOrderIsTheBarrier) {
  auto calls = testing::sim_control<decltype(&tidepool_sim_call_count)>("tidepool_sim_call_count");
  StreamRegistry registry(api());
  ASSERT_TRUE(registry.legacy_only());
  EXPECT_EQ(registry.device_barrier(context_), StreamRegistry::BarrierKind::failed)
      << "an incomplete registry cannot know that no stream exists";
  registry.set_complete(true);

  testing::Gate held;
  int cell = 0;
  ASSERT_EQ(testing::launch_gated_write(nullptr, &held, &cell, 1), CUDA_SUCCESS);
  const char* const kQueuingCalls[] = {"cuEventRecord", "cuStreamWaitEvent", "cuStreamIsCapturing", "cuEventQuery"};
  std::vector<std::uint64_t> before;
  for (const char* name : kQueuingCalls) before.push_back(calls(name));
  EXPECT_EQ(registry.device_barrier(context_), StreamRegistry::BarrierKind::in_order);
  for (std::size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(calls(kQueuingCalls[i]), before[i]) << kQueuingCalls[i] << " in a barrier made by the legacy order";
  }

  expect_a_new_stream_to_start_behind(registry, held, &cell);
  EXPECT_EQ(registry.device_barrier(context_), StreamRegistry::BarrierKind::queued);
}

// Each context has its own legacy stream, which orders nothing of another
// context's work: a barrier in a second context ends barriers made in
// order, and the host waits once for the work the first context's stood
// for (a block they gave back may go to the second context's work).
TEST_F(OrderTest, ABarrierInASecondContextWaitsOnceForTheFirstContextsWork) {
  CUcontext other = testing::second_device_context();
  if (other == nullptr) GTEST_SKIP() << "needs TIDEPOOL_SIM_DEVICES >= 2";
  StreamRegistry registry(api());
  registry.set_complete(true);
  testing::Gate held_here;
  int here_cell = 0;
  ASSERT_EQ(testing::launch_gated_write(nullptr, &held_here, &here_cell, 1), CUDA_SUCCESS);
  EXPECT_EQ(registry.device_barrier(context_), StreamRegistry::BarrierKind::in_order);
  EXPECT_EQ(registry.device_barrier(context_), StreamRegistry::BarrierKind::in_order);
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    held_here.release();
  });
  const StreamRegistry::BarrierKind there = registry.device_barrier(other);
  EXPECT_EQ(here_cell, 1) << "the second context's barrier did not wait for the first context's work";
  opener.join();
  EXPECT_EQ(there, StreamRegistry::BarrierKind::queued);
  EXPECT_FALSE(registry.legacy_only());
  EXPECT_EQ(registry.device_barrier(context_), StreamRegistry::BarrierKind::queued);
  ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
  {
    driver::ScopedContext scope(api(), other);
    ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
  }
  ASSERT_EQ(api().devicePrimaryCtxRelease(1), CUDA_SUCCESS);
}

// The program making a second context current (the context hooks) ends
// them too, with the same one wait; the first context made current again,
// or twice, does not. Nor does it matter that legacy_only had already
// ended (here on the per-thread stream, which follows only its own
// context's legacy stream): the blocks those barriers gave back are still
// anyone's at once.
TEST_F(OrderTest, ASecondContextMadeCurrentWaitsOnceForBarriersMadeInOrder) {
  CUcontext other = testing::second_device_context();
  if (other == nullptr) GTEST_SKIP() << "needs TIDEPOOL_SIM_DEVICES >= 2";
  for (const bool per_thread_first : {false, true}) {
    SCOPED_TRACE(per_thread_first ? "legacy_only ended by the per-thread stream first" : "legacy_only holding");
    StreamRegistry registry(api());
    registry.set_complete(true);
    registry.made_current(context_);
    registry.made_current(context_);
    testing::Gate held;
    int cell = 0;
    ASSERT_EQ(testing::launch_gated_write(nullptr, &held, &cell, 1), CUDA_SUCCESS);
    EXPECT_EQ(registry.device_barrier(context_), StreamRegistry::BarrierKind::in_order);
    registry.made_current(context_);
    EXPECT_TRUE(registry.legacy_only());
    if (per_thread_first) {
      registry.using_stream(CU_STREAM_PER_THREAD);
      EXPECT_FALSE(registry.legacy_only());
    }
    std::thread opener([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      held.release();
    });
    registry.made_current(other);
    EXPECT_EQ(cell, 1) << "a second context was made current without waiting for the first's work";
    opener.join();
    EXPECT_FALSE(registry.legacy_only());
    EXPECT_EQ(registry.device_barrier(context_), StreamRegistry::BarrierKind::queued);
    registry.made_current(other);  // once: nothing is left to wait for
    ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
  }
  ASSERT_EQ(api().devicePrimaryCtxRelease(1), CUDA_SUCCESS);
}

// What a cudaFree-style free waits for once several contexts may reach a
// pool: the work queued so far in every context seen but the pool's own,
// with the caller's context current again afterwards. A context that can
// no longer be made current (destroyed) is skipped, and said so, while the
// others are still waited for.
TEST_F(OrderTest, WaitingForOtherContextsWaitsForEachContextSeenButTheOneNamed) {
  CUcontext other = testing::second_device_context();
  if (other == nullptr) GTEST_SKIP() << "needs TIDEPOOL_SIM_DEVICES >= 2";
  using CtxCreate = CUresult (*)(CUcontext*, unsigned, CUdevice);
  using CtxDestroy = CUresult (*)(CUcontext);
  const auto create = testing::sim_control<CtxCreate>("cuCtxCreate_v2");
  const auto destroy = testing::sim_control<CtxDestroy>("cuCtxDestroy_v2");
  // Each context's legacy stream holds a write until the gate opens: the
  // other context's after 50 ms, this one's after 2 s, so that a wait for
  // this context shows as its write landed rather than as a hang.
  const auto wait_with_work_held = [&](StreamRegistry& registry, int value, int* here, int* there) {
    testing::Gate held_here;
    testing::Gate held_there;
    EXPECT_EQ(testing::launch_gated_write(nullptr, &held_here, here, value), CUDA_SUCCESS);
    {
      driver::ScopedContext scope(api(), other);
      EXPECT_EQ(testing::launch_gated_write(nullptr, &held_there, there, value), CUDA_SUCCESS);
    }
    std::atomic<bool> here_released{false};
    std::thread opener([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      held_there.release();
      std::this_thread::sleep_for(std::chrono::milliseconds(1950));
      here_released = true;
      held_here.release();
    });
    const bool all = registry.wait_for_contexts_but(context_);
    // The other context's write is read after its synchronisation; this
    // one's only once the device is idle again.
    EXPECT_EQ(*there, value) << "the other context's work was not waited for";
    EXPECT_FALSE(here_released.load()) << "the named context was waited for";
    CUcontext current = nullptr;
    EXPECT_EQ(api().ctxGetCurrent(&current), CUDA_SUCCESS);
    EXPECT_EQ(current, context_) << "the caller's context is not current again";
    opener.join();
    EXPECT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
    EXPECT_EQ(*here, value);
    *here = 0;
    return all;
  };
  int here = 0;
  int there = 0;
  {
    StreamRegistry registry(api());
    registry.set_complete(true);
    registry.made_current(context_);
    EXPECT_TRUE(registry.one_context());
    EXPECT_TRUE(registry.wait_for_contexts_but(context_)) << "nothing else to wait for";
    registry.made_current(other);
    EXPECT_FALSE(registry.one_context());
    EXPECT_TRUE(wait_with_work_held(registry, 1, &here, &there));
  }
  {
    // A context of the program's, seen and then destroyed before the other
    // device's: skipped, and the answer says so; the other is still waited for.
    StreamRegistry registry(api());
    registry.set_complete(true);
    registry.made_current(context_);
    CUcontext made = nullptr;
    ASSERT_EQ(create(&made, 0, 0), CUDA_SUCCESS);
    registry.context_seen(made);
    ASSERT_EQ(destroy(made), CUDA_SUCCESS);
    ASSERT_EQ(api().ctxSetCurrent(context_), CUDA_SUCCESS);
    registry.made_current(other);
    EXPECT_FALSE(wait_with_work_held(registry, 2, &here, &there)) << "a destroyed context was not reported skipped";
  }
  ASSERT_EQ(api().devicePrimaryCtxRelease(1), CUDA_SUCCESS);
}

// A kernel launched with programmatic stream serialization may begin before
// the kernel ahead of it has finished: the legacy stream's order stops being
// a barrier, and the barriers already made in it get a record between the
// two kernels, which a stream created later also starts behind.
TEST_F(OrderTest, AnOverlappingLaunchPutsARecordBehindTheBarriersMadeInOrder) {
  auto calls = testing::sim_control<decltype(&tidepool_sim_call_count)>("tidepool_sim_call_count");
  StreamRegistry registry(api());
  registry.set_complete(true);
  testing::Gate held;
  int cell = 0;
  ASSERT_EQ(testing::launch_gated_write(nullptr, &held, &cell, 1), CUDA_SUCCESS);
  ASSERT_EQ(registry.device_barrier(context_), StreamRegistry::BarrierKind::in_order);
  const auto records = calls("cuEventRecord");
  registry.overlapping_launch(context_);
  EXPECT_FALSE(registry.legacy_only());
  EXPECT_EQ(calls("cuEventRecord"), records + 1) << "no record went between the kernels";
  registry.overlapping_launch(context_);
  EXPECT_EQ(calls("cuEventRecord"), records + 1) << "one record stands for the barriers made in order";

  expect_a_new_stream_to_start_behind(registry, held, &cell);
}

// Work on the legacy stream keeps it so; the first submission on another
// stream (here a per-thread default stream, which no creation announces)
// ends it for good.
TEST_F(OrderTest, ASubmissionOnAnyOtherStreamEndsTheLegacyStreamsOrderAsABarrier) {
  StreamRegistry registry(api());
  registry.set_complete(true);
  registry.using_stream(nullptr);
  registry.using_stream(CU_STREAM_LEGACY);
  EXPECT_TRUE(registry.legacy_only());
  EXPECT_EQ(registry.device_barrier(context_), StreamRegistry::BarrierKind::in_order);
  registry.using_stream(CU_STREAM_PER_THREAD);
  EXPECT_FALSE(registry.legacy_only());
  EXPECT_EQ(registry.device_barrier(context_), StreamRegistry::BarrierKind::queued);
  registry.using_stream(CU_STREAM_LEGACY);
  EXPECT_FALSE(registry.legacy_only()) << "it never comes back";
}

// The followers' table: every stream it took is found, one it had no room
// for is not (barriers then treat it as before), a stream given up leaves
// the others on its probe run findable, its slot is taken again, and a
// handle met again in another context gets a fresh slot.
TEST(StreamFollowersTable, FindsWhatItTrackedAndNothingElseThroughGivingUpAndReuse) {
  auto followers = std::make_unique<StreamFollowers>();
  std::atomic<std::uint64_t> generation{3};
  auto handle = [](std::size_t i) { return reinterpret_cast<CUstream>(0x10000 + 64 * i); };
  auto* const first_context = reinterpret_cast<CUcontext>(0x100);
  auto* const second_context = reinterpret_cast<CUcontext>(0x200);
  constexpr std::size_t kStreams = 2 * StreamFollowers::kSlots;
  std::vector<bool> tracked(kStreams);
  std::size_t count = 0;
  for (std::size_t i = 0; i < kStreams; ++i) {
    tracked[i] = followers->track(handle(i), first_context, &generation, 3) != nullptr;
    count += tracked[i] ? 1 : 0;
  }
  EXPECT_GT(count, StreamFollowers::kSlots / 2);
  EXPECT_LE(count, StreamFollowers::kSlots) << "more streams than slots cannot all be tracked";
  for (std::size_t i = 0; i < kStreams; ++i) {
    StreamFollowers::Slot* slot = followers->find(handle(i));
    ASSERT_EQ(slot != nullptr, tracked[i]) << i;
    if (slot == nullptr) continue;
    EXPECT_EQ(slot->context, first_context);
    EXPECT_TRUE(slot->unjoined.load()) << "a stream just tracked counts as having work";
    EXPECT_EQ(slot->followed.load(), 3U);
  }
  for (std::size_t i = 0; i < kStreams; i += 2) {
    if (tracked[i]) followers->forget(handle(i));
  }
  for (std::size_t i = 0; i < kStreams; ++i) {
    EXPECT_EQ(followers->find(handle(i)) != nullptr, tracked[i] && i % 2 == 1) << i;
  }
  std::size_t retaken = 0;
  for (std::size_t i = 0; i < kStreams; i += 2) {
    if (tracked[i]) retaken += followers->track(handle(i), first_context, &generation, 3) != nullptr ? 1 : 0;
  }
  EXPECT_GT(retaken, 0U) << "slots given up are taken again";

  std::size_t kept = 1;
  while (!tracked[kept]) kept += 2;
  std::atomic<std::uint64_t> other_generation{0};
  StreamFollowers::Slot* moved = followers->track(handle(kept), second_context, &other_generation, 0);
  if (moved != nullptr) {
    EXPECT_EQ(followers->find(handle(kept)), moved);
    EXPECT_EQ(moved->context, second_context);
    EXPECT_EQ(moved->generation, &other_generation);
  } else {
    EXPECT_EQ(followers->find(handle(kept)), nullptr) << "never found with the other context's fields";
  }
}

// While submissions are followed, a barrier joins only the streams that
// queued work since they were last joined, and leaves tracked streams to
// wait for it at their next submission: with one idle stream it queues one
// record and nothing else. The stream's next submission waits first, so its
// work still lands after work queued before the barrier; once that
// submission has returned, the next barrier joins the stream again. A gate
// (moves of live pages) still makes every stream wait at once.
TEST_F(OrderTest, ABarrierLeavesAnIdleFollowedStreamToCatchUpAtItsNextSubmission) {
  BarrierCalls since;
  StreamRegistry registry(api());
  CUstream s = follow_with_a_stream(registry);

  since.mark();
  ASSERT_EQ(registry.device_barrier(context_), StreamRegistry::BarrierKind::queued);
  EXPECT_EQ(since(0), 2U) << "a new stream may have work: joined, then the barrier's own record";
  EXPECT_EQ(since(1), 1U) << "the legacy stream waits for the join; the stream itself waits later";

  since.mark();
  ASSERT_EQ(registry.device_barrier(context_), StreamRegistry::BarrierKind::queued);
  EXPECT_EQ(since(0), 1U) << "an idle stream needs no join";
  EXPECT_EQ(since(1), 0U) << "nor a wait until it submits";
  EXPECT_EQ(since(2), 1U) << "only the legacy stream is asked about a capture";

  testing::Gate held;
  testing::Gate open;
  open.release();
  int cell = 0;
  ASSERT_EQ(testing::launch_gated_write(nullptr, &held, &cell, 1), CUDA_SUCCESS);
  ASSERT_EQ(registry.device_barrier(context_), StreamRegistry::BarrierKind::queued);
  since.mark();
  StreamFollowers::Slot* slot = registry.using_stream(s);
  ASSERT_NE(slot, nullptr) << "a non-blocking stream created through the registry is tracked";
  registry.catching_up(s, slot);
  EXPECT_EQ(since(1), 1U) << "the submission waits for the barrier first";
  ASSERT_EQ(testing::launch_gated_write(s, &open, &cell, 2), CUDA_SUCCESS);
  StreamRegistry::submitted(slot);
  registry.catching_up(s, slot);
  EXPECT_EQ(since(1), 0U) << "caught up: the next submission waits for nothing";
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(cell, 0) << "the stream's write overtook the legacy stream's, queued before the barrier";
  held.release();
  ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(cell, 2);

  since.mark();
  ASSERT_EQ(registry.device_barrier(context_), StreamRegistry::BarrierKind::queued);
  EXPECT_EQ(since(0), 2U) << "the stream submitted since: joined again";
  EXPECT_EQ(since(1), 1U);

  ASSERT_TRUE(registry.device_gate(context_, [](CUstream*) { return true; }));
  EXPECT_EQ(since(1), 1U) << "a gate makes the idle stream wait at once";
  registry.catching_up(s, slot);
  EXPECT_EQ(since(1), 0U) << "behind the gate, so behind every barrier before it";

  EXPECT_TRUE(registry.destroying(s));
  EXPECT_EQ(registry.using_stream(s), nullptr) << "a stream being destroyed is no longer tracked";
  ASSERT_EQ(api().streamDestroy(s), CUDA_SUCCESS);
}

// A barrier with nothing to join and no stream to make wait stands on the
// newest barrier's event while nothing was queued on the legacy stream
// since: it queues nothing, and a stream that caught up needs no wait. Work
// on the legacy stream, a retired stream's work, or a second context makes
// the next one record afresh.
TEST_F(OrderTest, ABarrierWithNothingQueuedSinceTheLastStandsOnItsEvent) {
  BarrierCalls since;
  StreamRegistry registry(api());
  registry.made_current(context_);
  CUstream s = follow_with_a_stream(registry);
  StreamFollowers::Slot* slot = registry.using_stream(s);
  ASSERT_NE(slot, nullptr);

  ASSERT_EQ(registry.device_barrier(context_), StreamRegistry::BarrierKind::queued);
  since.mark();
  for (int round = 0; round < 3; ++round) {
    ASSERT_EQ(registry.device_barrier(context_), StreamRegistry::BarrierKind::standing);
    EXPECT_EQ(since(0), 0U) << "round " << round << ": the newest barrier's event still marks the legacy tail";
    EXPECT_EQ(since(1), 0U);
    EXPECT_EQ(since(2), 0U) << "nothing queued: no capture to ask about";
  }
  registry.catching_up(s, slot);
  EXPECT_EQ(since(1), 1U) << "the stream waits once, for the first barrier's event";
  ASSERT_EQ(registry.device_barrier(context_), StreamRegistry::BarrierKind::standing);
  registry.catching_up(s, slot);
  EXPECT_EQ(since(0) + since(1), 0U) << "behind that event already";

  // Work on the legacy stream since: the next barrier records its tail, and
  // the stream's next submission waits for it.
  testing::Gate held;
  testing::Gate open;
  open.release();
  int cell = 0;
  ASSERT_EQ(testing::launch_gated_write(nullptr, &held, &cell, 1), CUDA_SUCCESS);
  registry.submitted_unfollowed();
  since.mark();
  ASSERT_EQ(registry.device_barrier(context_), StreamRegistry::BarrierKind::queued);
  EXPECT_EQ(since(0), 1U) << "the legacy stream took work since the last record";
  registry.catching_up(s, slot);
  EXPECT_EQ(since(1), 1U);
  ASSERT_EQ(testing::launch_gated_write(s, &open, &cell, 2), CUDA_SUCCESS);
  StreamRegistry::submitted(slot);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(cell, 0) << "the stream's write overtook the legacy stream's, queued before the barrier";
  held.release();
  ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(cell, 2);
  ASSERT_EQ(registry.device_barrier(context_), StreamRegistry::BarrierKind::queued);  // joins the stream

  // A stream retired with work still queued: the legacy stream waits for it,
  // then records afresh.
  testing::Gate retiring;
  CUstream dying = make_stream(CU_STREAM_NON_BLOCKING);
  registry.created(dying);
  ASSERT_EQ(testing::launch_gated_write(dying, &retiring, &cell, 3), CUDA_SUCCESS);
  EXPECT_TRUE(registry.destroying(dying));
  ASSERT_EQ(api().streamDestroy(dying), CUDA_SUCCESS);
  since.mark();
  ASSERT_EQ(registry.device_barrier(context_), StreamRegistry::BarrierKind::queued);
  EXPECT_EQ(since(0), 1U) << "the retired stream's work is not behind the last record";
  EXPECT_EQ(since(1), 1U);
  retiring.release();
  ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
  since.mark();
  ASSERT_EQ(registry.device_barrier(context_), StreamRegistry::BarrierKind::standing);
  EXPECT_EQ(since(0), 0U) << "its work finished: nothing left to wait for";

  // A gate during which another thread's legacy submission returns: the
  // gate may have ended on a stream of its own behind an earlier record on
  // the legacy stream, so that submission keeps its mark for the next
  // barrier, which then records; the one after it stands.
  ASSERT_TRUE(registry.device_gate(context_, [&](CUstream*) {
    registry.submitted_unfollowed();
    return true;
  }));
  since.mark();
  ASSERT_EQ(registry.device_barrier(context_), StreamRegistry::BarrierKind::queued);
  EXPECT_EQ(since(0), 1U);
  EXPECT_EQ(registry.device_barrier(context_), StreamRegistry::BarrierKind::standing);

  // A second context: the legacy-work mark speaks for no one context.
  registry.several_contexts();
  since.mark();
  ASSERT_EQ(registry.device_barrier(context_), StreamRegistry::BarrierKind::queued);
  EXPECT_EQ(since(0), 1U);
  ASSERT_EQ(registry.device_barrier(context_), StreamRegistry::BarrierKind::queued);
  EXPECT_EQ(since(0), 1U);

  EXPECT_TRUE(registry.destroying(s));
  ASSERT_EQ(api().streamDestroy(s), CUDA_SUCCESS);
}

// Without followed submissions (a registry the preload's hooks do not
// feed), every barrier joins every non-blocking stream and makes it wait.
TEST_F(OrderTest, WithoutFollowedSubmissionsEveryBarrierJoinsAndHoldsEveryStream) {
  auto calls = testing::sim_control<decltype(&tidepool_sim_call_count)>("tidepool_sim_call_count");
  StreamRegistry registry(api());
  registry.set_complete(true);
  CUstream s = make_stream(CU_STREAM_NON_BLOCKING);
  registry.created(s);
  EXPECT_EQ(registry.using_stream(s), nullptr);
  for (int round = 0; round < 2; ++round) {
    const std::uint64_t records = calls("cuEventRecord");
    const std::uint64_t waits = calls("cuStreamWaitEvent");
    ASSERT_EQ(registry.device_barrier(context_), StreamRegistry::BarrierKind::queued);
    EXPECT_EQ(calls("cuEventRecord") - records, 2U);
    EXPECT_EQ(calls("cuStreamWaitEvent") - waits, 2U);
  }
  EXPECT_TRUE(registry.destroying(s));
  ASSERT_EQ(api().streamDestroy(s), CUDA_SUCCESS);
}

}  // namespace
}  // namespace tidepool::order
