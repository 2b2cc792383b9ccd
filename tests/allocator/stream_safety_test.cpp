// Specification: a block is never handed to new work while work queued
// earlier can still touch it. Each test queues a slow (gated) write on the
// sim, frees the block the way a program would, allocates again, and checks
// that the new owner's bytes survive the old writer. The new owner writes
// from the host (what memory written outside streams needs: free_barrier off)
// or through a stream (a device barrier orders it after the old writer).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/allocator.hpp"
#include "support/sim_driver.hpp"
#include "support/sim_kernels.hpp"

namespace tidepool {
namespace {

using util::MiB;

// Two simulated devices unless the environment says otherwise, for the test
// of a stream of another device. Runs before main, before the sim reads its
// environment.
[[maybe_unused]] const bool kTwoDevices = [] {
  ::setenv("TIDEPOOL_SIM_DEVICES", "2", 0);
  return true;
}();

// An allocator whose registry is fed by the test, as the preload's hooks feed
// the runtime's, and known complete.
std::unique_ptr<runtime::Allocator> make_allocator(std::size_t limit, bool free_barrier = false, bool evict = false,
                                                   std::size_t hold_slack_percent = 3) {
  runtime::AllocatorOptions options;
  options.device_limit = limit;
  options.pool.free_barrier = free_barrier;
  options.pool.hold_slack_percent = hold_slack_percent;
  options.evict = evict;
  auto created = runtime::Allocator::create(testing::sim_driver(), options);
  EXPECT_TRUE(created.ok()) << created.status().message();
  if (!created.ok()) return nullptr;
  created.value()->streams().set_complete(true);
  return std::move(created.value());
}

void inject_fault(const char* name, unsigned nth, CUresult result) {
  testing::sim_control<decltype(&tidepool_sim_inject_fault)>("tidepool_sim_inject_fault")(name, nth, result);
}

std::uint64_t calls(const char* name) {
  return testing::sim_control<decltype(&tidepool_sim_call_count)>("tidepool_sim_call_count")(name);
}

std::uint64_t host_waits() {
  return calls("cuEventSynchronize") + calls("cuStreamSynchronize") + calls("cuCtxSynchronize") +
         calls("cuCtxSynchronize_v2");
}

// How long an import may wait for the work queued before it.
std::chrono::steady_clock::time_point soon() { return std::chrono::steady_clock::now() + std::chrono::seconds(5); }

// Host<->device copies take bytes / gbps of their stream's time (0: at once).
void set_copy_gbps(double gbps) {
  testing::sim_control<decltype(&tidepool_sim_set_copy_gbps)>("tidepool_sim_set_copy_gbps")(gbps);
}

void clear_faults() { testing::sim_control<decltype(&tidepool_sim_clear_faults)>("tidepool_sim_clear_faults")(); }

// Opens `gate` from another thread after `ms`, for tests whose allocation may
// rightly wait for the gated write.
std::thread open_later(testing::Gate& gate, int ms = 60) {
  return std::thread([&gate, ms] {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    gate.release();
  });
}

// Opens `gate` after 3 s if nothing else has: only so that a host wait a
// test forbids fails the test rather than hangs it.
std::thread open_if_still_shut(testing::Gate& gate) {
  return std::thread([&gate] {
    std::unique_lock<std::mutex> lock(gate.m);
    if (!gate.cv.wait_for(lock, std::chrono::seconds(3), [&gate] { return gate.open; })) {
      lock.unlock();
      gate.release();
    }
  });
}

bool filled_with(std::uintptr_t address, std::size_t size, unsigned char value) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(address);
  for (std::size_t i = 0; i < size; ++i) {
    if (bytes[i] != value) return false;
  }
  return true;
}

class StreamSafety : public ::testing::Test {
 protected:
  void SetUp() override {
    allocator_ = make_allocator(64 * MiB);
    ASSERT_NE(allocator_, nullptr);
    scope_ = std::make_unique<driver::ScopedContext>(api(), allocator_->context());
  }
  void TearDown() override {
    clear_faults();
    (void)api().ctxSynchronize();
    scope_.reset();
    allocator_.reset();
  }
  static const driver::Api& api() { return testing::sim_driver().api(); }
  CUstream make_stream(unsigned flags) {
    CUstream s = nullptr;
    EXPECT_EQ(api().streamCreate(&s, flags), CUDA_SUCCESS);
    allocator_->stream_created(s);
    return s;
  }
  void destroy_stream(CUstream s) {
    allocator_->stream_destroying(s);
    EXPECT_EQ(api().streamDestroy(s), CUDA_SUCCESS);
  }
  // Under a one-page budget, frees a block with cudaFree semantics while
  // `writer` still has a gated write of 1 to its first int queued, then
  // allocates the same size again (cudaMalloc semantics), which can only be
  // served from the freed page, and fills the new block with 0x5a. After the
  // gate opens and the device is idle, the new block must be intact.
  void expect_reuse_waits_for(CUstream writer, bool destroy_writer_first) {
    constexpr std::size_t kSize = 2 * MiB;
    ASSERT_TRUE(allocator_->pool().set_device_limit(kSize).ok());
    auto first = allocator_->allocate(kSize, 0, false);
    ASSERT_TRUE(first.ok()) << first.status().message();
    testing::Gate gate;
    ASSERT_EQ(testing::launch_gated_write(writer, &gate, reinterpret_cast<int*>(first.value()), 1), CUDA_SUCCESS);
    if (destroy_writer_first) destroy_stream(writer);
    ASSERT_TRUE(allocator_->deallocate(first.value(), 0, false).ok());
    std::thread opener = open_later(gate);
    auto second = allocator_->allocate(kSize, 0, false);
    const bool ok = second.ok();
    if (ok) std::memset(reinterpret_cast<void*>(second.value()), 0x5a, kSize);
    opener.join();
    ASSERT_TRUE(ok) << second.status().message();
    ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
    EXPECT_TRUE(filled_with(second.value(), kSize, 0x5a)) << "the old owner's queued write landed in the new block";
    EXPECT_TRUE(allocator_->deallocate(second.value(), 0, false).ok());
  }

  // With free_barrier on: as above, but the new owner fills the block with
  // 0x5a through cuMemsetD8Async on `user` (made by `make_user` after the
  // reallocation when `user_after` is set, so it was no part of the barrier).
  // The allocation must come back without any host wait while the old write
  // is still gated, and the fill must land after it.
  template <typename MakeUser>
  // Call use_barrier_allocator() first, before any stream is made: the
  // registry is the allocator's.
  void expect_barrier_orders(CUstream writer, MakeUser make_user, bool user_after, bool destroy_writer = false) {
    ASSERT_TRUE(allocator_->pool().options().free_barrier);
    constexpr std::size_t kSize = 2 * MiB;
    ASSERT_TRUE(allocator_->pool().set_device_limit(kSize).ok());
    CUstream user = user_after ? nullptr : make_user();
    auto first = allocator_->allocate(kSize, 0, false);
    ASSERT_TRUE(first.ok()) << first.status().message();
    testing::Gate gate;
    ASSERT_EQ(testing::launch_gated_write(writer, &gate, reinterpret_cast<int*>(first.value()), 1), CUDA_SUCCESS);
    if (destroy_writer) destroy_stream(writer);
    ASSERT_TRUE(allocator_->deallocate(first.value(), 0, false).ok());
    // Opened at once after the fill is queued; the timer only keeps a host
    // wait (a failure) from hanging the test.
    std::thread opener = open_if_still_shut(gate);
    const std::uint64_t waits_before = host_waits();
    auto second = allocator_->allocate(kSize, 0, false);
    const std::uint64_t waits = host_waits() - waits_before;
    if (second.ok()) {
      if (user_after) user = make_user();
      EXPECT_EQ(api().memsetD8Async(static_cast<CUdeviceptr>(second.value()), 0x5a, kSize, user), CUDA_SUCCESS);
    }
    gate.release();
    opener.join();
    ASSERT_TRUE(second.ok()) << second.status().message();
    EXPECT_EQ(second.value(), first.value()) << "a one-page budget leaves only the freed page";
    EXPECT_EQ(waits, 0u) << "the host waited for the old writer";
    EXPECT_EQ(allocator_->pool().stats().device_barriers, 1u);
    ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
    EXPECT_TRUE(filled_with(second.value(), kSize, 0x5a)) << "the old owner's queued write landed after the fill";
    EXPECT_TRUE(allocator_->deallocate(second.value(), 0, false).ok());
    if (user != nullptr) destroy_stream(user);
  }

  // A block of `size` on a new non-blocking stream (`*writer`), a write of
  // 1 to its first int queued there behind `gate`, and the block freed
  // while the write waits: in the stream's order, or cudaFree-style.
  // Returns its address (0 when a step failed).
  std::uintptr_t free_under_a_held_write(std::size_t size, testing::Gate& gate, CUstream* writer,
                                         bool in_order = true) {
    *writer = make_stream(CU_STREAM_NON_BLOCKING);
    const auto key = reinterpret_cast<std::uintptr_t>(*writer);
    auto block = allocator_->allocate(size, key, in_order);
    EXPECT_TRUE(block.ok()) << block.status().message();
    if (!block.ok()) return 0;
    EXPECT_EQ(testing::launch_gated_write(*writer, &gate, reinterpret_cast<int*>(block.value()), 1), CUDA_SUCCESS);
    EXPECT_TRUE(allocator_->deallocate(block.value(), key, in_order).ok());
    return block.value();
  }

  void use_barrier_allocator() {
    allocator_ = make_allocator(64 * MiB, /*free_barrier=*/true);
    ASSERT_NE(allocator_, nullptr);
  }

  // With the barrier allocator at a budget of four pages: [freed][kept] on
  // the legacy stream, a write to `freed` queued there when it is freed
  // (`ordered`: in stream order, else cudaFree-style), then `big`, three
  // pages where two can be made, which takes the freed block's page while
  // the write is queued and parks its old mapping. Returns once the write
  // is done, which no one tells the pool.
  struct ParkedPage {
    std::uintptr_t freed = 0;
    std::uintptr_t kept = 0;
    std::uintptr_t big = 0;
    // Made by big's allocation, queued or (all work being on the legacy
    // stream) in its order: a stitching barrier in stream order, the
    // promotion of the cudaFree-style free otherwise.
    std::uint64_t barriers = 0;
  };
  static constexpr std::size_t kParkPage = 2 * MiB;
  ParkedPage park_a_page_under_a_queued_write(bool ordered) {
    ParkedPage parked;
    use_barrier_allocator();
    if (allocator_ == nullptr || !allocator_->pool().set_device_limit(4 * kParkPage).ok()) return parked;
    auto freed = allocator_->allocate(kParkPage, 0, ordered);
    auto kept = allocator_->allocate(kParkPage, 0, ordered);
    if (!freed.ok() || !kept.ok()) return parked;
    testing::Gate old_work;
    if (testing::launch_gated_write(nullptr, &old_work, reinterpret_cast<int*>(freed.value()), 1) != CUDA_SUCCESS) {
      return parked;
    }
    EXPECT_TRUE(allocator_->deallocate(freed.value(), 0, ordered).ok());
    std::thread opener = open_if_still_shut(old_work);
    const auto barriers = [&] {
      const auto& stats = allocator_->pool().stats();
      return stats.stitching_barriers + stats.legacy_order_barriers;
    };
    const std::uint64_t barriers_before = barriers();
    auto big = allocator_->allocate(3 * kParkPage, 0, ordered);
    parked.barriers = barriers() - barriers_before;
    old_work.release();
    opener.join();
    while (api().streamQuery(nullptr) == CUDA_ERROR_NOT_READY) std::this_thread::yield();
    EXPECT_TRUE(big.ok()) << big.status().message();
    parked.freed = freed.value();
    parked.kept = kept.value();
    parked.big = big.ok() ? big.value() : 0;
    return parked;
  }

  // Then: newer work queued on the legacy stream (a write to `elsewhere`,
  // held 200 ms), `kept` freed, and a page requested, whose best fit is the
  // freed block's old place, over the parked mapping.
  struct OldPlaceAgain {
    util::Result<std::uintptr_t> again{std::uintptr_t{0}};
    std::uint64_t waits = 0;   // host waits the request made
    std::uint64_t unmaps = 0;  // cuMemUnmap calls it made
    pool::PoolStats before;
    pool::PoolStats after;
  };
  OldPlaceAgain request_the_old_place(const ParkedPage& parked, bool ordered, int* elsewhere) {
    OldPlaceAgain result;
    testing::Gate new_work;
    EXPECT_EQ(testing::launch_gated_write(nullptr, &new_work, elsewhere, 2), CUDA_SUCCESS);
    std::thread new_opener = open_later(new_work, 200);
    EXPECT_TRUE(allocator_->deallocate(parked.kept, 0, ordered).ok());
    result.before = allocator_->pool().stats();
    const std::uint64_t waits_before = host_waits();
    const std::uint64_t unmaps_before = calls("cuMemUnmap");
    result.again = allocator_->allocate(kParkPage, 0, ordered);
    result.waits = host_waits() - waits_before;
    result.unmaps = calls("cuMemUnmap") - unmaps_before;
    result.after = allocator_->pool().stats();
    new_opener.join();
    EXPECT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
    return result;
  }

  // With the barrier allocator, its slack over the peak wider than one page
  // (with one page, a range would wait and take a page of its own whatever
  // else is free: pool.cpp, place_unbacked): [freed][kept][big][backed]
  // [bound], a write to `freed` queued behind `gate` when it is freed
  // cudaFree-style, `big` taking its page behind a barrier, then `backed`
  // (5 MiB of new pages, bounded by `bound` in its last page) and `kept`
  // freed. The request for a page that follows has the old place (4 MiB)
  // as its best fit, over the parked mapping, and `backed` (larger, wholly
  // backed) as one of the next sizes up. `opener` opens `gate` after 3 s if
  // nothing has. `bound` is 0 when a step failed.
  struct OldPlaceBesideABackedBlock {
    explicit OldPlaceBesideABackedBlock(testing::Gate& g) : gate(g) {}
    OldPlaceBesideABackedBlock(const OldPlaceBesideABackedBlock&) = delete;
    OldPlaceBesideABackedBlock& operator=(const OldPlaceBesideABackedBlock&) = delete;
    // A test that stops early still opens the gate and joins the opener.
    ~OldPlaceBesideABackedBlock() { finish(); }
    void finish() {
      gate.release();
      if (opener.joinable()) opener.join();
    }
    testing::Gate& gate;
    std::uintptr_t freed = 0;
    std::uintptr_t big = 0;
    std::uintptr_t backed = 0;
    std::uintptr_t bound = 0;
    std::thread opener;
  };
  // Fills `setup` (made over the gate the write waits behind).
  void old_place_beside_a_backed_block(OldPlaceBesideABackedBlock& setup) {
    testing::Gate& gate = setup.gate;
    allocator_ = make_allocator(64 * MiB, /*free_barrier=*/true, /*evict=*/false, /*hold_slack_percent=*/100);
    if (allocator_ == nullptr || !allocator_->pool().set_device_limit(4 * kParkPage).ok()) return;
    auto freed = allocator_->allocate(kParkPage, 0, false);
    auto kept = allocator_->allocate(kParkPage, 0, false);
    if (!freed.ok() || !kept.ok()) return;
    EXPECT_EQ(testing::launch_gated_write(nullptr, &gate, reinterpret_cast<int*>(freed.value()), 1), CUDA_SUCCESS);
    EXPECT_TRUE(allocator_->deallocate(freed.value(), 0, false).ok());
    setup.opener = open_if_still_shut(gate);
    auto big = allocator_->allocate(3 * kParkPage, 0, false);
    if (!big.ok()) return;
    EXPECT_EQ(api().memsetD8Async(static_cast<CUdeviceptr>(big.value()), 0x5a, 3 * kParkPage, nullptr), CUDA_SUCCESS);
    if (!allocator_->pool().set_device_limit(8 * kParkPage).ok()) return;
    auto backed = allocator_->allocate(5 * MiB, 0, false);
    auto bound = allocator_->allocate(MiB, 0, false);
    if (!backed.ok() || !bound.ok()) return;
    EXPECT_TRUE(allocator_->deallocate(backed.value(), 0, false).ok());
    EXPECT_TRUE(allocator_->deallocate(kept.value(), 0, false).ok());
    setup.freed = freed.value();
    setup.big = big.value();
    setup.backed = backed.value();
    setup.bound = bound.value();
  }

  // Once the queued write is done: it landed before `big`'s fill and not in
  // `again`, the block the request got, and no page was unmapped under it.
  void expect_old_place_safe(const OldPlaceBesideABackedBlock& setup, std::uintptr_t again) {
    std::memset(reinterpret_cast<void*>(again), 0x33, kParkPage);
    ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
    EXPECT_TRUE(filled_with(again, kParkPage, 0x33)) << "the queued write landed in a later block";
    EXPECT_TRUE(filled_with(setup.big, 3 * kParkPage, 0x5a)) << "the queued write landed after the new owner's fill";
    EXPECT_EQ(testing::sim_control<std::uint64_t (*)()>("tidepool_sim_remap_faults")(), 0u)
        << "a page was unmapped under the queued write";
    for (const std::uintptr_t block : {again, setup.big, setup.bound}) {
      EXPECT_TRUE(allocator_->deallocate(block, 0, false).ok());
    }
  }

  void expect_parked_page_answered_without_a_wait(bool ordered) {
    const ParkedPage parked = park_a_page_under_a_queued_write(ordered);
    ASSERT_NE(parked.big, 0u);
    ASSERT_EQ(parked.barriers, 1u) << "the page was not taken behind a barrier";
    int elsewhere = 0;
    const OldPlaceAgain r = request_the_old_place(parked, ordered, &elsewhere);
    ASSERT_TRUE(r.again.ok()) << r.again.status().message();
    ASSERT_EQ(r.again.value(), parked.freed) << "the best fit is the old place, and no backed block could serve";
    EXPECT_GE(r.unmaps, 1u) << "the parked mapping was not there to go";
    EXPECT_EQ(r.after.pending_page_detours, r.before.pending_page_detours);
    EXPECT_EQ(r.after.pending_page_waits, r.before.pending_page_waits) << "the old write was not known done";
    EXPECT_EQ(r.waits, 0u) << "waited for the newer work to prove the old write done";
    EXPECT_LE(r.after.reserved_bytes, 4 * kParkPage);
    EXPECT_EQ(elsewhere, 2);
    ASSERT_EQ(api().memsetD8Async(static_cast<CUdeviceptr>(r.again.value()), 0x33, kParkPage, nullptr), CUDA_SUCCESS);
    ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
    EXPECT_TRUE(filled_with(r.again.value(), kParkPage, 0x33));
    EXPECT_EQ(testing::sim_control<std::uint64_t (*)()>("tidepool_sim_remap_faults")(), 0u)
        << "a page was unmapped under a queued write";
    EXPECT_TRUE(allocator_->deallocate(r.again.value(), 0, ordered).ok());
    EXPECT_TRUE(allocator_->deallocate(parked.big, 0, ordered).ok());
  }

  // OnlyOnTheLegacyStream...: a one-page budget, a barrier made in the
  // legacy stream's order, then a block written on the legacy stream (held
  // by a gate) freed cudaFree-style or in stream order there, and a
  // cudaMalloc-style request, which must get that page with no driver call.
  void expect_reused_in_legacy_order(bool freed_in_stream_order) {
    use_barrier_allocator();
    ASSERT_NE(allocator_, nullptr);
    constexpr std::size_t kSize = 2 * MiB;
    ASSERT_TRUE(allocator_->pool().set_device_limit(kSize).ok());
    // The first free waits for a batch: its barrier, made in order, marks the pool.
    auto warm = allocator_->allocate(kSize, 0, false);
    ASSERT_TRUE(warm.ok());
    ASSERT_TRUE(allocator_->deallocate(warm.value(), 0, false).ok());
    auto first = allocator_->allocate(kSize, 0, false);
    ASSERT_TRUE(first.ok()) << first.status().message();
    EXPECT_EQ(allocator_->pool().stats().legacy_order_barriers, 1u);
    testing::Gate gate;
    ASSERT_EQ(testing::launch_gated_write(nullptr, &gate, reinterpret_cast<int*>(first.value()), 1), CUDA_SUCCESS);
    std::thread opener = open_if_still_shut(gate);
    const char* names[] = {"cuEventRecord", "cuEventQuery", "cuStreamWaitEvent", "cuCtxGetCurrent",
                           "cuStreamIsCapturing"};
    std::vector<std::uint64_t> before;
    for (const char* name : names) before.push_back(calls(name));
    const std::uint64_t waits_before = host_waits();
    ASSERT_TRUE(allocator_->deallocate(first.value(), 0, freed_in_stream_order).ok());
    EXPECT_EQ(allocator_->pool().stats().deferred_bytes, 0u) << "the free was deferred";
    EXPECT_EQ(allocator_->pool().stats().legacy_order_barriers, freed_in_stream_order ? 1u : 2u);
    auto second = allocator_->allocate(kSize, 0, false);
    ASSERT_TRUE(second.ok()) << second.status().message();
    EXPECT_EQ(second.value(), first.value()) << "a one-page budget leaves only the freed page";
    for (std::size_t i = 0; i < std::size(names); ++i) EXPECT_EQ(calls(names[i]), before[i]) << names[i];
    EXPECT_EQ(host_waits(), waits_before) << "the host waited for the old writer";
    CUstream user = make_stream(CU_STREAM_NON_BLOCKING);
    EXPECT_EQ(api().memsetD8Async(static_cast<CUdeviceptr>(second.value()), 0x5a, kSize, user), CUDA_SUCCESS);
    gate.release();
    opener.join();
    ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
    EXPECT_TRUE(filled_with(second.value(), kSize, 0x5a)) << "the old owner's queued write landed after the fill";
    EXPECT_EQ(allocator_->pool().stats().device_barriers, 0u);
    EXPECT_TRUE(allocator_->deallocate(second.value(), 0, false).ok());
    destroy_stream(user);
  }

  std::unique_ptr<runtime::Allocator> allocator_;
  std::unique_ptr<driver::ScopedContext> scope_;
};

TEST_F(StreamSafety, BarrierOrdersTheLegacyStreamAfterANonBlockingWriter) {
  use_barrier_allocator();
  CUstream side = make_stream(CU_STREAM_NON_BLOCKING);
  expect_barrier_orders(
      side, [] { return CUstream{nullptr}; }, false);
  destroy_stream(side);
}

TEST_F(StreamSafety, BarrierOrdersAnotherNonBlockingStreamAfterTheWriter) {
  use_barrier_allocator();
  CUstream side = make_stream(CU_STREAM_NON_BLOCKING);
  expect_barrier_orders(
      side, [this] { return make_stream(CU_STREAM_NON_BLOCKING); }, false);
  destroy_stream(side);
}

TEST_F(StreamSafety, ANonBlockingStreamCreatedAfterTheBarrierStartsBehindIt) {
  use_barrier_allocator();
  CUstream side = make_stream(CU_STREAM_NON_BLOCKING);
  expect_barrier_orders(
      side, [this] { return make_stream(CU_STREAM_NON_BLOCKING); }, true);
  destroy_stream(side);
}

// The new stream's wait fails: the host waits for the barrier instead (here
// until the test's timer opens the gate), and the registry stays complete.
TEST_F(StreamSafety, AStreamThatCannotWaitForTheBarrierMakesTheHostWait) {
  use_barrier_allocator();
  CUstream side = make_stream(CU_STREAM_NON_BLOCKING);
  expect_barrier_orders(
      side,
      [this] {
        inject_fault("cuStreamWaitEvent", 1, CUDA_ERROR_UNKNOWN);
        return make_stream(CU_STREAM_NON_BLOCKING);
      },
      true);
  EXPECT_TRUE(allocator_->streams().complete());
  destroy_stream(side);
}

TEST_F(StreamSafety, BarrierOrdersANonBlockingStreamAfterALegacyWriter) {
  use_barrier_allocator();
  expect_barrier_orders(
      nullptr, [this] { return make_stream(CU_STREAM_NON_BLOCKING); }, false);
}

TEST_F(StreamSafety, BarrierOrdersAfterADestroyedStreamsQueuedWrite) {
  use_barrier_allocator();
  // The writer is destroyed, its work still gated, before the free.
  expect_barrier_orders(
      make_stream(CU_STREAM_NON_BLOCKING), [this] { return make_stream(CU_STREAM_NON_BLOCKING); }, false,
      /*destroy_writer=*/true);
}

TEST_F(StreamSafety, WithoutACompleteRegistryNoBarrierIsAssumed) {
  use_barrier_allocator();
  allocator_->streams().set_complete(false);
  CUstream unseen = nullptr;  // created behind tidepool's back
  ASSERT_EQ(api().streamCreate(&unseen, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  expect_reuse_waits_for(unseen, false);
  EXPECT_EQ(allocator_->pool().stats().device_barriers, 0u);
  ASSERT_EQ(api().streamDestroy(unseen), CUDA_SUCCESS);
}

TEST_F(StreamSafety, CudaFreeWaitsForANonBlockingStreamThePoolNeverSaw) {
  CUstream side = make_stream(CU_STREAM_NON_BLOCKING);
  expect_reuse_waits_for(side, false);
  destroy_stream(side);
}

TEST_F(StreamSafety, CudaFreeWaitsForADestroyedNonBlockingStreamsQueuedWork) {
  expect_reuse_waits_for(make_stream(CU_STREAM_NON_BLOCKING), true);
}

TEST_F(StreamSafety, CudaFreeWaitsForADestroyedBlockingStreamsQueuedWork) {
  expect_reuse_waits_for(make_stream(0), true);
}

// A stream destroyed with work queued sends its free blocks to wait as
// cudaFree frees do. Such a block spans the reservation's unbacked address
// space too; the report counts only the bytes that hold memory.
TEST_F(StreamSafety, AFreeBlockOfADestroyedStreamCountsOnlyItsBackedBytesAsDeferred) {
  constexpr std::size_t kSize = 8 * MiB;
  testing::Gate gate;
  std::thread opener = open_if_still_shut(gate);
  CUstream writer = nullptr;
  if (free_under_a_held_write(kSize, gate, &writer) == 0) {
    gate.release();
    opener.join();
    FAIL();
  }
  const pool::PoolStats before = allocator_->pool().stats();
  destroy_stream(writer);
  const pool::PoolStats after = allocator_->pool().stats();
  gate.release();
  opener.join();
  // The gated write must be done before `gate` goes out of scope.
  ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
  ASSERT_EQ(after.free_blocks + 1, before.free_blocks) << "the block did not wait for the destroyed stream's work";
  EXPECT_EQ(after.deferred_bytes, kSize);
  EXPECT_LE(after.deferred_bytes, after.free_bytes) << "deferred bytes counted address space that holds no memory";
}

// With free_barrier on, a cudaMalloc-style request over blocks another
// stream freed in its order while its writes are still queued: the first
// makes a device barrier instead of a host wait, and the second, freed
// before that barrier, needs no fence at all. The new owner's fills, on a
// stream made afterwards, land after the old writes.
TEST_F(StreamSafety, ACudaMallocTakesBlocksFreedInStreamOrderElsewhereBehindABarrierWithoutAWait) {
  use_barrier_allocator();
  constexpr std::size_t kSize = 2 * MiB;
  ASSERT_TRUE(allocator_->pool().set_device_limit(2 * kSize).ok());
  CUstream writer = make_stream(CU_STREAM_NON_BLOCKING);
  const auto key = reinterpret_cast<std::uintptr_t>(writer);
  auto a = allocator_->allocate(kSize, key, true);
  auto b = allocator_->allocate(kSize, key, true);
  ASSERT_TRUE(a.ok() && b.ok());
  testing::Gate gate;
  std::thread opener = open_if_still_shut(gate);
  ASSERT_EQ(testing::launch_gated_write(writer, &gate, reinterpret_cast<int*>(a.value()), 1), CUDA_SUCCESS);
  ASSERT_EQ(testing::launch_gated_write(writer, &gate, reinterpret_cast<int*>(b.value()), 1), CUDA_SUCCESS);
  ASSERT_TRUE(allocator_->deallocate(a.value(), key, true).ok());
  ASSERT_TRUE(allocator_->deallocate(b.value(), key, true).ok());

  const std::uint64_t waits_before = host_waits();
  auto first = allocator_->allocate(kSize, 0, false);
  const std::uint64_t records_before = calls("cuEventRecord") + calls("cuEventQuery") + calls("cuStreamWaitEvent");
  auto second = allocator_->allocate(kSize, 0, false);
  const std::uint64_t second_calls =
      calls("cuEventRecord") + calls("cuEventQuery") + calls("cuStreamWaitEvent") - records_before;
  const std::uint64_t waits = host_waits() - waits_before;
  CUstream user = make_stream(CU_STREAM_NON_BLOCKING);
  if (first.ok()) {
    EXPECT_EQ(api().memsetD8Async(first.value(), 0x5a, kSize, user), CUDA_SUCCESS);
  }
  if (second.ok()) {
    EXPECT_EQ(api().memsetD8Async(second.value(), 0x5b, kSize, user), CUDA_SUCCESS);
  }
  gate.release();
  opener.join();
  ASSERT_TRUE(first.ok()) << first.status().message();
  ASSERT_TRUE(second.ok()) << second.status().message();
  EXPECT_EQ(waits, 0u) << "the host waited for the old writer";
  EXPECT_EQ(second_calls, 0u) << "a block freed before the barrier was fenced again";
  const pool::PoolStats stats = allocator_->pool().stats();
  EXPECT_EQ(stats.handout_barriers, 1u);
  EXPECT_EQ(stats.cross_stream_waits, 0u);
  EXPECT_LE(stats.reserved_bytes, 2 * kSize);
  ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
  EXPECT_TRUE(filled_with(first.value(), kSize, 0x5a)) << "an old write landed after the new owner's fill";
  EXPECT_TRUE(filled_with(second.value(), kSize, 0x5b)) << "an old write landed after the new owner's fill";
  EXPECT_TRUE(allocator_->deallocate(first.value(), 0, false).ok());
  EXPECT_TRUE(allocator_->deallocate(second.value(), 0, false).ok());
  destroy_stream(user);
  destroy_stream(writer);
}

// The handout barrier is a device barrier like any: a cudaFree free still
// waiting for one (deferred: too small to promote yet) goes back behind it,
// so that a request needing its place later makes no barrier of its own.
TEST_F(StreamSafety, ACudaFreeFreeWaitingForABarrierGoesBackBehindAHandoutBarrier) {
  use_barrier_allocator();
  constexpr std::size_t kSize = 2 * MiB;
  ASSERT_TRUE(allocator_->pool().set_device_limit(2 * kSize).ok());
  CUstream writer = make_stream(CU_STREAM_NON_BLOCKING);
  const auto key = reinterpret_cast<std::uintptr_t>(writer);
  auto in_order = allocator_->allocate(kSize, key, true);
  auto small = allocator_->allocate(4096, 0, false);  // alone on the second page
  ASSERT_TRUE(in_order.ok() && small.ok());
  testing::Gate gate;
  std::thread opener = open_if_still_shut(gate);
  ASSERT_EQ(testing::launch_gated_write(writer, &gate, reinterpret_cast<int*>(in_order.value()), 1), CUDA_SUCCESS);
  ASSERT_TRUE(allocator_->deallocate(in_order.value(), key, true).ok());
  ASSERT_TRUE(allocator_->deallocate(small.value(), 0, false).ok());
  const pool::PoolStats before = allocator_->pool().stats();
  auto first = allocator_->allocate(kSize, 0, false);  // the stream-ordered block, behind a handout barrier
  const pool::PoolStats between = allocator_->pool().stats();
  auto second = allocator_->allocate(kSize, 0, false);  // the second page, the small block's place included
  const pool::PoolStats after = allocator_->pool().stats();
  gate.release();
  opener.join();
  ASSERT_TRUE(first.ok()) << first.status().message();
  ASSERT_TRUE(second.ok()) << second.status().message();
  EXPECT_EQ(first.value(), in_order.value());
  EXPECT_EQ(before.deferred_bytes, 4096u);
  EXPECT_EQ(between.handout_barriers, 1u);
  EXPECT_EQ(between.deferred_bytes, 0u) << "the handout barrier left the cudaFree free waiting";
  EXPECT_EQ(after.device_barriers + after.legacy_order_barriers + after.stitching_barriers,
            before.device_barriers + before.legacy_order_barriers + before.stitching_barriers)
      << "a barrier was made besides the handout's";
  EXPECT_EQ(after.handout_barriers, 1u);
  ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
  EXPECT_TRUE(allocator_->deallocate(first.value(), 0, false).ok());
  EXPECT_TRUE(allocator_->deallocate(second.value(), 0, false).ok());
  destroy_stream(writer);
}

// Once another context can reach the pool's memory, a barrier of this
// context's streams would not order a cudaMalloc-style owner's work: the
// host waits for the old write instead, and no barrier is made.
TEST_F(StreamSafety, OnceAnotherContextCanReachThePoolACudaMallocWaitsForAStreamOrderedFree) {
  use_barrier_allocator();
  allocator_->streams().several_contexts();
  constexpr std::size_t kSize = 2 * MiB;
  ASSERT_TRUE(allocator_->pool().set_device_limit(kSize).ok());
  CUstream writer = make_stream(CU_STREAM_NON_BLOCKING);
  const auto key = reinterpret_cast<std::uintptr_t>(writer);
  auto first = allocator_->allocate(kSize, key, true);
  ASSERT_TRUE(first.ok()) << first.status().message();
  auto* cell = reinterpret_cast<int*>(first.value());
  testing::Gate gate;
  ASSERT_EQ(testing::launch_gated_write(writer, &gate, cell, 1), CUDA_SUCCESS);
  ASSERT_TRUE(allocator_->deallocate(first.value(), key, true).ok());
  std::thread opener = open_later(gate);
  const std::uint64_t waits_before = host_waits();
  auto second = allocator_->allocate(kSize, 0, false);
  const int seen = *cell;
  const std::uint64_t waits = host_waits() - waits_before;
  opener.join();
  ASSERT_TRUE(second.ok()) << second.status().message();
  EXPECT_EQ(second.value(), first.value()) << "a one-page budget leaves only the freed page";
  EXPECT_EQ(seen, 1) << "handed out before the old owner's write ran";
  EXPECT_GE(waits, 1u);
  EXPECT_EQ(allocator_->pool().stats().handout_barriers, 0u);
  EXPECT_EQ(allocator_->pool().stats().cross_stream_waits, 1u);
  EXPECT_TRUE(allocator_->deallocate(second.value(), 0, false).ok());
  destroy_stream(writer);
}

// Another process's work is ordered after nothing queued here: a block that
// came to its owner while an earlier owner's write was still queued (behind
// a device barrier, or in its stream's order) is mapped by another process
// (IPC, Pool::hold_for_import) only once that write is done. The host waits
// for it once, on the exporter's side, never in the allocation; a later
// import of the same block waits for nothing.
TEST_F(StreamSafety, AnotherProcessMapsABlockOnlyOnceTheWorkQueuedBeforeItsOwnerIsDone) {
  enum class Way { cuda_free_then_cuda_malloc, stream_free_then_cuda_malloc, stream_free_then_same_stream };
  for (const Way way :
       {Way::cuda_free_then_cuda_malloc, Way::stream_free_then_cuda_malloc, Way::stream_free_then_same_stream}) {
    SCOPED_TRACE(static_cast<int>(way));
    use_barrier_allocator();
    constexpr std::size_t kSize = 2 * MiB;
    pool::Pool& pool = allocator_->pool();
    ASSERT_TRUE(pool.set_device_limit(kSize).ok());
    const bool freed_in_order = way != Way::cuda_free_then_cuda_malloc;
    const bool taken_in_order = way == Way::stream_free_then_same_stream;
    testing::Gate gate;
    std::thread safety = open_if_still_shut(gate);
    CUstream writer = nullptr;
    const std::uintptr_t freed = free_under_a_held_write(kSize, gate, &writer, freed_in_order);
    const auto key = reinterpret_cast<std::uintptr_t>(writer);
    auto* cell = reinterpret_cast<int*>(freed);
    if (freed == 0) {
      gate.release();
      safety.join();
      FAIL();
    }
    const std::uint64_t waits_before = host_waits();
    auto second = allocator_->allocate(kSize, key, taken_in_order);
    const std::uint64_t allocation_waits = host_waits() - waits_before;

    std::thread opener = open_later(gate);
    std::uintptr_t base = 0;
    std::size_t size = 0;
    std::uint64_t id = 0;
    const bool found = second.ok() && pool.find_containing(second.value(), &base, &size, &id);
    space::AddressSpace::SharedPages pages;
    const util::Status held =
        found ? pool.hold_for_import(second.value(), id, &pages, soon()) : util::Status::success();
    const int seen = *cell;
    opener.join();
    safety.join();
    ASSERT_TRUE(second.ok()) << second.status().message();
    ASSERT_TRUE(found);
    EXPECT_EQ(second.value(), freed) << "a one-page budget leaves only the freed page";
    EXPECT_EQ(allocation_waits, 0u) << "the allocation waited for the old writer";
    ASSERT_TRUE(held.ok()) << held.message();
    EXPECT_EQ(seen, 1) << "another process could map the block before the old owner's write ran";
    EXPECT_EQ(pool.stats().import_waits, 1u);

    const std::uint64_t waits_again = host_waits();
    space::AddressSpace::SharedPages again;
    EXPECT_TRUE(pool.hold_for_import(second.value(), id, &again, soon()).ok());
    EXPECT_EQ(host_waits(), waits_again) << "nothing was queued before the second import";
    EXPECT_EQ(pool.stats().import_waits, 1u);
    EXPECT_FALSE(pool.release_import_hold(second.value(), id));
    EXPECT_FALSE(pool.release_import_hold(second.value(), id));
    EXPECT_TRUE(allocator_->deallocate(second.value(), key, taken_in_order).ok());
    destroy_stream(writer);
  }
}

// While all work is on the legacy stream (legacy order: a cudaFree-style
// free goes back at once), its own record answers the import's wait.
TEST_F(StreamSafety, AnImportInLegacyOrderWaitsForTheLegacyStreamsEarlierWork) {
  use_barrier_allocator();
  constexpr std::size_t kSize = 2 * MiB;
  pool::Pool& pool = allocator_->pool();
  ASSERT_TRUE(pool.set_device_limit(kSize).ok());
  auto first = allocator_->allocate(kSize, 0, false);
  ASSERT_TRUE(first.ok()) << first.status().message();
  auto* cell = reinterpret_cast<int*>(first.value());
  testing::Gate gate;
  ASSERT_EQ(testing::launch_gated_write(nullptr, &gate, cell, 1), CUDA_SUCCESS);
  ASSERT_TRUE(allocator_->deallocate(first.value(), 0, false).ok());
  std::thread opener = open_later(gate, 200);
  const std::uint64_t waits_before = host_waits();
  auto second = allocator_->allocate(kSize, 0, false);
  const std::uint64_t allocation_waits = host_waits() - waits_before;
  std::uintptr_t base = 0;
  std::size_t size = 0;
  std::uint64_t id = 0;
  const bool found = second.ok() && pool.find_containing(second.value(), &base, &size, &id);
  space::AddressSpace::SharedPages pages;
  const util::Status held = found ? pool.hold_for_import(second.value(), id, &pages, soon()) : util::Status::success();
  const int seen = *cell;
  opener.join();
  ASSERT_TRUE(found);
  EXPECT_EQ(allocation_waits, 0u) << "the allocation waited for the old owner's write";
  EXPECT_EQ(second.value(), first.value());
  EXPECT_GE(pool.stats().legacy_order_barriers, 1u) << "not in legacy order";
  ASSERT_TRUE(held.ok()) << held.message();
  EXPECT_EQ(seen, 1) << "another process could map the block before the old owner's write ran";
  EXPECT_EQ(pool.stats().import_waits, 1u);
  EXPECT_FALSE(pool.release_import_hold(second.value(), id));
  EXPECT_TRUE(allocator_->deallocate(second.value(), 0, false).ok());
}

// Work queued before the block that does not finish by the deadline (here
// a write held until the test opens its gate) costs the import: refused,
// nothing held, and the owner's free takes effect at once.
TEST_F(StreamSafety, AnImportWhoseEarlierWorkOutlastsItsDeadlineIsRefusedAndHoldsNothing) {
  use_barrier_allocator();
  constexpr std::size_t kSize = 2 * MiB;
  pool::Pool& pool = allocator_->pool();
  ASSERT_TRUE(pool.set_device_limit(kSize).ok());
  testing::Gate gate;
  std::thread opener = open_if_still_shut(gate);
  CUstream writer = nullptr;
  const bool freed = free_under_a_held_write(kSize, gate, &writer) != 0;
  auto second = allocator_->allocate(kSize, 0, false);
  std::uintptr_t base = 0;
  std::size_t size = 0;
  std::uint64_t id = 0;
  const bool found = freed && second.ok() && pool.find_containing(second.value(), &base, &size, &id);
  space::AddressSpace::SharedPages pages;
  const auto start = std::chrono::steady_clock::now();
  const util::Status held =
      found ? pool.hold_for_import(second.value(), id, &pages, start + std::chrono::milliseconds(50))
            : util::Status::success();
  bool gate_was_shut = false;
  {
    std::lock_guard<std::mutex> shut(gate.m);
    gate_was_shut = !gate.open;
  }
  gate.release();
  opener.join();
  ASSERT_TRUE(found);
  EXPECT_TRUE(gate_was_shut) << "the import outwaited the test's own bound";
  EXPECT_FALSE(held.ok());
  EXPECT_EQ(held.error(), util::Error::driver_error);
  EXPECT_TRUE(pages.pages.empty());
  EXPECT_EQ(pool.stats().import_waits, 0u);
  EXPECT_FALSE(pool.release_import_hold(second.value(), id)) << "a refused import held the block";
  ASSERT_TRUE(allocator_->deallocate(second.value(), 0, false).ok());
  EXPECT_EQ(pool.stats().live_bytes, 0u);
  ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
  destroy_stream(writer);
}

// With a page mover (eviction on) the wait covers the mover's own copy
// streams with events too, so the deadline bounds it as well: a context
// synchronisation would wait for the held write.
TEST_F(StreamSafety, AnImportUnderAPageMoverWhoseEarlierWorkOutlastsItsDeadlineIsRefused) {
  allocator_ = make_allocator(64 * MiB, /*free_barrier=*/true, /*evict=*/true);
  ASSERT_NE(allocator_, nullptr);
  ASSERT_NE(allocator_->residency(), nullptr) << allocator_->eviction_off_reason();
  constexpr std::size_t kSize = 2 * MiB;
  pool::Pool& pool = allocator_->pool();
  testing::Gate gate;
  std::thread opener = open_if_still_shut(gate);
  CUstream writer = nullptr;
  const bool freed = free_under_a_held_write(kSize, gate, &writer) != 0;
  // On the writer's stream, in its order: the allocation itself needs no wait.
  auto second = allocator_->allocate(kSize, reinterpret_cast<std::uintptr_t>(writer), true);
  std::uintptr_t base = 0;
  std::size_t size = 0;
  std::uint64_t id = 0;
  const bool found = freed && second.ok() && pool.find_containing(second.value(), &base, &size, &id);
  const std::uint64_t waits_before = host_waits();
  space::AddressSpace::SharedPages pages;
  const util::Status held = found
                                ? pool.hold_for_import(second.value(), id, &pages,
                                                       std::chrono::steady_clock::now() + std::chrono::milliseconds(50))
                                : util::Status::success();
  bool gate_was_shut = false;
  {
    std::lock_guard<std::mutex> shut(gate.m);
    gate_was_shut = !gate.open;
  }
  const std::uint64_t waits = host_waits() - waits_before;
  gate.release();
  opener.join();
  ASSERT_TRUE(found);
  EXPECT_TRUE(gate_was_shut) << "the import outwaited the test's own bound";
  EXPECT_EQ(waits, 0u) << "the host waited";
  EXPECT_FALSE(held.ok());
  EXPECT_TRUE(pages.pages.empty());
  EXPECT_FALSE(pool.release_import_hold(second.value(), id)) << "a refused import held the block";
  ASSERT_TRUE(allocator_->deallocate(second.value(), 0, false).ok());
  ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
  destroy_stream(writer);
}

// A block whose pages were moved to the host is brought back for an
// import, and the import waits for the copies bringing them back (on the
// mover's own stream) before it hands the pages out.
TEST_F(StreamSafety, AnImportOfAnEvictedBlockWaitsForItsPagesToComeBack) {
  constexpr std::size_t kSize = 2 * MiB;
  allocator_ = make_allocator(2 * kSize, /*free_barrier=*/true, /*evict=*/true);
  ASSERT_NE(allocator_, nullptr);
  ASSERT_NE(allocator_->residency(), nullptr) << allocator_->eviction_off_reason();
  pool::Pool& pool = allocator_->pool();
  auto shared = allocator_->allocate(kSize, 0, false);
  ASSERT_TRUE(shared.ok()) << shared.status().message();
  std::memset(reinterpret_cast<void*>(shared.value()), 0x6b, kSize);
  auto other = allocator_->allocate(kSize, 0, false);
  ASSERT_TRUE(other.ok());
  // The shared block is the one to move out when the budget runs short.
  ASSERT_TRUE(pool.advise(other.value(), kSize, pool::Pool::Advice::keep_resident).ok());
  ASSERT_TRUE(pool.advise(shared.value(), kSize, pool::Pool::Advice::wont_need).ok());
  auto third = allocator_->allocate(kSize, 0, false);  // over the budget
  ASSERT_TRUE(third.ok());
  ASSERT_EQ(allocator_->space().host_pages(), 1u);
  ASSERT_TRUE(allocator_->deallocate(third.value(), 0, false).ok());
  ASSERT_TRUE(pool.set_device_limit(4 * kSize).ok());  // room to bring it back
  ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
  std::uintptr_t base = 0;
  std::size_t size = 0;
  std::uint64_t id = 0;
  ASSERT_TRUE(pool.find_containing(shared.value(), &base, &size, &id));
  set_copy_gbps(0.05);  // 2 MiB back in about 40 ms
  space::AddressSpace::SharedPages pages;
  const util::Status held = pool.hold_for_import(shared.value(), id, &pages, soon());
  const bool landed = filled_with(shared.value(), kSize, 0x6b);
  set_copy_gbps(0);
  ASSERT_TRUE(held.ok()) << held.message();
  EXPECT_FALSE(pages.pages.empty());
  EXPECT_EQ(allocator_->space().host_pages(), 0u);
  EXPECT_TRUE(landed) << "the import handed out pages before their copy back landed";
  EXPECT_FALSE(pool.release_import_hold(shared.value(), id));  // not freed: the hold just ends
  ASSERT_TRUE(allocator_->deallocate(shared.value(), 0, false).ok());
  ASSERT_TRUE(allocator_->deallocate(other.value(), 0, false).ok());
  ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
}

// A pool that never took a block back has nothing queued before any owner:
// an import waits for nothing. During a capture the wait cannot be made (a
// synchronisation would invalidate the capture): the import waits for the
// capture to end first.
TEST_F(StreamSafety, AnImportWaitsForNothingWithoutAFreeAndForACaptureToEndBeforeItsWait) {
  use_barrier_allocator();
  pool::Pool& pool = allocator_->pool();
  auto block = allocator_->allocate(MiB, 0, false);
  ASSERT_TRUE(block.ok()) << block.status().message();
  std::uintptr_t base = 0;
  std::size_t size = 0;
  std::uint64_t id = 0;
  ASSERT_TRUE(pool.find_containing(block.value(), &base, &size, &id));
  const std::uint64_t waits_before = host_waits();
  space::AddressSpace::SharedPages pages;
  EXPECT_TRUE(pool.hold_for_import(block.value(), id, &pages, soon()).ok());
  EXPECT_EQ(host_waits(), waits_before);
  EXPECT_EQ(pool.stats().import_waits, 0u);
  EXPECT_FALSE(pool.release_import_hold(block.value(), id));

  // A free, and an allocation that takes it back behind a barrier.
  auto other = allocator_->allocate(MiB, 0, false);
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(allocator_->deallocate(other.value(), 0, false).ok());
  other = allocator_->allocate(MiB, 0, false);
  ASSERT_TRUE(other.ok());
  CUstream capturing = make_stream(CU_STREAM_NON_BLOCKING);
  const auto begin = testing::sim_control<decltype(&::cuStreamBeginCapture_v2)>("cuStreamBeginCapture_v2");
  const auto end = testing::sim_control<decltype(&::cuStreamEndCapture)>("cuStreamEndCapture");
  const auto destroy_graph = testing::sim_control<decltype(&::cuGraphDestroy)>("cuGraphDestroy");
  ASSERT_EQ(begin(capturing, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  std::atomic<bool> imported{false};
  util::Status during;
  std::thread importer([&] {
    space::AddressSpace::SharedPages held;
    during = pool.hold_for_import(block.value(), id, &held, soon());
    imported = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const bool before_the_end = imported.load();
  CUgraph graph = nullptr;
  const CUresult ended = end(capturing, &graph);
  importer.join();
  ASSERT_EQ(ended, CUDA_SUCCESS) << "the import invalidated the capture";
  if (graph != nullptr) {
    EXPECT_EQ(destroy_graph(graph), CUDA_SUCCESS);
  }
  EXPECT_FALSE(before_the_end) << "the import went on during the capture";
  EXPECT_TRUE(during.ok()) << during.message();
  EXPECT_EQ(pool.stats().import_waits, 1u);
  EXPECT_FALSE(pool.release_import_hold(block.value(), id));
  EXPECT_TRUE(allocator_->deallocate(block.value(), 0, false).ok());
  EXPECT_TRUE(allocator_->deallocate(other.value(), 0, false).ok());
  EXPECT_EQ(pool.stats().live_bytes, 0u);
  destroy_stream(capturing);
}

TEST_F(StreamSafety, AStreamFirstMetInAStreamOrderedCallJoinsTheFence) {
  CUstream unseen = nullptr;  // created behind the registry's back...
  ASSERT_EQ(api().streamCreate(&unseen, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  const auto key = reinterpret_cast<std::uintptr_t>(unseen);
  auto met = allocator_->allocate(512, key, true);  // ...but met here
  ASSERT_TRUE(met.ok());
  ASSERT_TRUE(allocator_->deallocate(met.value(), key, true).ok());
  EXPECT_TRUE(allocator_->streams().alive(unseen));
  expect_reuse_waits_for(unseen, false);
  destroy_stream(unseen);
}

TEST_F(StreamSafety, CudaFreeWaitsForEveryStreamWhenTheRegistryIsIncomplete) {
  allocator_->streams().set_complete(false);
  CUstream unseen = nullptr;  // created behind tidepool's back
  ASSERT_EQ(api().streamCreate(&unseen, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  expect_reuse_waits_for(unseen, false);
  ASSERT_EQ(api().streamDestroy(unseen), CUDA_SUCCESS);
}

class FailedFenceCall : public StreamSafety, public ::testing::WithParamInterface<const char*> {};

TEST_P(FailedFenceCall, IsNeverReadAsFinished) {
  CUstream side = make_stream(CU_STREAM_NON_BLOCKING);
  // The first call of the named function from here on fails.
  inject_fault(GetParam(), 1, CUDA_ERROR_UNKNOWN);
  expect_reuse_waits_for(side, false);
  destroy_stream(side);
}

INSTANTIATE_TEST_SUITE_P(EveryFenceCall, FailedFenceCall,
                         ::testing::Values("cuEventRecord", "cuEventQuery", "cuEventSynchronize", "cuEventCreate"));

TEST_F(StreamSafety, AFailedCrossStreamFenceFallsBackToASafeWait) {
  CUstream a = make_stream(CU_STREAM_NON_BLOCKING);
  CUstream b = make_stream(CU_STREAM_NON_BLOCKING);
  const auto sa = reinterpret_cast<std::uintptr_t>(a);
  const auto sb = reinterpret_cast<std::uintptr_t>(b);
  auto first = allocator_->allocate(4096, sa, true);
  ASSERT_TRUE(first.ok());
  auto* cell = reinterpret_cast<int*>(first.value());
  testing::Gate gate;
  ASSERT_EQ(testing::launch_gated_write(a, &gate, cell, 1), CUDA_SUCCESS);
  ASSERT_TRUE(allocator_->deallocate(first.value(), sa, true).ok());
  inject_fault("cuEventRecord", 1, CUDA_ERROR_UNKNOWN);
  std::thread opener = open_later(gate);
  auto second = allocator_->allocate(4096, sb, true);
  ASSERT_TRUE(second.ok()) << second.status().message();
  if (second.value() == first.value()) {
    // Reused: only safe because the pool waited for stream a's write.
    EXPECT_EQ(*cell, 1) << "handed out before stream a's write ran";
  }
  opener.join();
  EXPECT_TRUE(allocator_->deallocate(second.value(), sb, true).ok());
  destroy_stream(a);
  destroy_stream(b);
}

TEST_F(StreamSafety, StitchingNeverUnmapsPagesUnderQueuedWork) {
  ASSERT_TRUE(allocator_->pool().set_device_limit(8 * MiB).ok());
  CUstream side = make_stream(CU_STREAM_NON_BLOCKING);
  auto first = allocator_->allocate(4 * MiB, 0, false);
  ASSERT_TRUE(first.ok());
  testing::Gate gate;
  int* last_word = reinterpret_cast<int*>(first.value() + 4 * MiB) - 1;
  ASSERT_EQ(testing::launch_gated_write(side, &gate, last_word, 7), CUDA_SUCCESS);
  ASSERT_TRUE(allocator_->deallocate(first.value(), 0, false).ok());
  std::thread opener = open_later(gate);
  // Needs every page of the budget: the freed block's pages must be
  // re-stitched, which may happen only after the write (a SIGSEGV otherwise).
  auto big = allocator_->allocate(8 * MiB, 0, false);
  opener.join();
  ASSERT_TRUE(big.ok()) << big.status().message();
  std::memset(reinterpret_cast<void*>(big.value()), 0x11, 8 * MiB);
  ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
  EXPECT_TRUE(filled_with(big.value(), 8 * MiB, 0x11));
  EXPECT_TRUE(allocator_->deallocate(big.value(), 0, false).ok());
  destroy_stream(side);
}

// Behind a device barrier, stitching takes a freed block's pages while its
// work is still queued, without a host wait: the work queued later, which the
// new owner's is, runs after it. The old mapping stays until that work is
// done: the queued write still lands (in the page, now the new block's, before
// the new owner's fill), and a request over the old place either waits for it
// or goes to a backed block; its address is never unmapped under the write (a
// SIGSEGV here) nor mapped to another page first (the write would land in the
// later block's bytes).
TEST_F(StreamSafety, PagesTakenBehindABarrierKeepTheirOldPlaceUntilItsWorkIsDone) {
  use_barrier_allocator();
  constexpr std::size_t kPage = 2 * MiB;
  ASSERT_TRUE(allocator_->pool().set_device_limit(4 * kPage).ok());
  auto freed = allocator_->allocate(kPage, 0, false);
  auto kept = allocator_->allocate(kPage, 0, false);  // bounds the freed block's range
  ASSERT_TRUE(freed.ok() && kept.ok());
  testing::Gate gate;
  ASSERT_EQ(testing::launch_gated_write(nullptr, &gate, reinterpret_cast<int*>(freed.value()), 1), CUDA_SUCCESS);
  ASSERT_TRUE(allocator_->deallocate(freed.value(), 0, false).ok());
  std::thread opener = open_if_still_shut(gate);
  // Three pages where two can be made: one comes from under the freed block.
  const std::uint64_t waits_before = host_waits();
  auto big = allocator_->allocate(3 * kPage, 0, false);
  const std::uint64_t waits = host_waits() - waits_before;
  ASSERT_TRUE(big.ok()) << big.status().message();
  EXPECT_EQ(waits, 0u) << "stitching waited for the queued write";
  EXPECT_LE(allocator_->pool().stats().reserved_bytes, 4 * kPage);
  ASSERT_EQ(api().memsetD8Async(static_cast<CUdeviceptr>(big.value()), 0x5a, 3 * kPage, nullptr), CUDA_SUCCESS);
  // The old place again, while the write is still queued: the freed block's
  // range (with the kept block's, freed now) is the best fit.
  ASSERT_TRUE(allocator_->deallocate(kept.value(), 0, false).ok());
  const pool::PoolStats before = allocator_->pool().stats();
  std::thread release_soon = open_later(gate, 100);
  auto again = allocator_->allocate(kPage, 0, false);
  const pool::PoolStats after = allocator_->pool().stats();
  release_soon.join();
  opener.join();
  ASSERT_TRUE(again.ok()) << again.status().message();
  ASSERT_EQ(again.value(), freed.value()) << "the best fit is the old place, and no backed block could serve";
  EXPECT_EQ(after.pending_page_waits, before.pending_page_waits + 1) << "mapped over the queued write's page";
  std::memset(reinterpret_cast<void*>(again.value()), 0x33, kPage);
  ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
  EXPECT_TRUE(filled_with(again.value(), kPage, 0x33)) << "the queued write landed in a later block";
  EXPECT_TRUE(filled_with(big.value(), 3 * kPage, 0x5a)) << "the queued write landed after the new owner's fill";
  EXPECT_EQ(testing::sim_control<std::uint64_t (*)()>("tidepool_sim_remap_faults")(), 0u)
      << "a page was unmapped under the queued write";
  EXPECT_TRUE(allocator_->deallocate(again.value(), 0, false).ok());
  EXPECT_TRUE(allocator_->deallocate(big.value(), 0, false).ok());
}

// The same old place, now with a free block already backed that fits the
// request too (one of the next sizes up from the best fit). The request
// still takes the place its policy chose and waits for the queued write
// alone: taking the backed block instead would make where blocks land, and
// so how much the pool holds, depend on how far the device lags.
TEST_F(StreamSafety, ARequestOverAPagesOldPlaceKeepsItsPlaceWhenABackedBlockWouldServe) {
  testing::Gate gate;
  OldPlaceBesideABackedBlock setup(gate);
  old_place_beside_a_backed_block(setup);
  ASSERT_NE(setup.bound, 0u);
  const pool::PoolStats before = allocator_->pool().stats();
  std::thread release_soon = open_later(gate, 100);
  auto again = allocator_->allocate(kParkPage, 0, false);
  const pool::PoolStats after = allocator_->pool().stats();
  release_soon.join();
  setup.finish();
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again.value(), setup.freed) << "the request left its best fit for the backed block";
  EXPECT_EQ(after.pending_page_detours, before.pending_page_detours);
  EXPECT_EQ(after.pending_page_waits, before.pending_page_waits + 1) << "mapped over the queued write's page";
  expect_old_place_safe(setup, again.value());
}

// While a capture runs, that wait could invalidate it: the request goes to
// the backed block instead, with no host wait, and the capture ends valid.
TEST_F(StreamSafety, DuringACaptureARequestOverAPagesOldPlaceTakesABackedBlockRatherThanWait) {
  testing::Gate gate;
  OldPlaceBesideABackedBlock setup(gate);
  old_place_beside_a_backed_block(setup);
  ASSERT_NE(setup.bound, 0u);
  CUstream capturing = make_stream(CU_STREAM_NON_BLOCKING);
  const auto begin = testing::sim_control<decltype(&::cuStreamBeginCapture_v2)>("cuStreamBeginCapture_v2");
  const auto end = testing::sim_control<decltype(&::cuStreamEndCapture)>("cuStreamEndCapture");
  const auto destroy_graph = testing::sim_control<decltype(&::cuGraphDestroy)>("cuGraphDestroy");
  const CUresult begun = begin(capturing, CU_STREAM_CAPTURE_MODE_GLOBAL);
  const pool::PoolStats before = allocator_->pool().stats();
  const std::uint64_t waits_before = host_waits();
  auto again = allocator_->allocate(kParkPage, 0, false);
  const std::uint64_t waits = host_waits() - waits_before;
  const pool::PoolStats after = allocator_->pool().stats();
  CUgraph graph = nullptr;
  const CUresult ended = begun == CUDA_SUCCESS ? end(capturing, &graph) : begun;
  if (graph != nullptr) {
    EXPECT_EQ(destroy_graph(graph), CUDA_SUCCESS);
  }
  setup.finish();
  destroy_stream(capturing);
  ASSERT_EQ(begun, CUDA_SUCCESS);
  EXPECT_EQ(ended, CUDA_SUCCESS) << "the request invalidated the capture";
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again.value(), setup.backed) << "the backed block, the one place ready without a wait, was not taken";
  EXPECT_EQ(after.pending_page_detours, before.pending_page_detours + 1);
  EXPECT_EQ(after.pending_page_waits, before.pending_page_waits);
  EXPECT_EQ(waits, 0u) << "the host waited during the capture";
  expect_old_place_safe(setup, again.value());
}

// At a full budget, a request over a place whose page stitching took earlier
// finds the pool has learnt to hold one more page than the budget lets it
// create. It takes an idle page behind the device barrier instead, without a
// host wait: it does not fail the placement and synchronise the context,
// waiting for work queued since that has nothing to do with either page.
TEST_F(StreamSafety, AtAFullBudgetARequestStitchesRatherThanWaitForUnrelatedWork) {
  constexpr std::size_t kPage = kParkPage;
  const ParkedPage parked = park_a_page_under_a_queued_write(/*ordered=*/false);
  ASSERT_NE(parked.big, 0u);
  int elsewhere = 0;
  const OldPlaceAgain r = request_the_old_place(parked, /*ordered=*/false, &elsewhere);
  ASSERT_TRUE(r.again.ok()) << r.again.status().message();
  EXPECT_EQ(r.again.value(), parked.freed) << "the old place, the best fit, was not taken";
  EXPECT_EQ(r.waits, 0u) << "waited for the newer work";
  EXPECT_LE(r.after.reserved_bytes, 4 * kPage);
  EXPECT_EQ(r.after.pending_page_waits, r.before.pending_page_waits);
  EXPECT_EQ(r.after.pending_page_detours, r.before.pending_page_detours);
  EXPECT_EQ(elsewhere, 2);
  EXPECT_EQ(testing::sim_control<std::uint64_t (*)()>("tidepool_sim_remap_faults")(), 0u);
  EXPECT_TRUE(allocator_->deallocate(r.again.value(), 0, false).ok());
  EXPECT_TRUE(allocator_->deallocate(parked.big, 0, false).ok());
}

// A stream-ordered request that must stitch takes the pages of a block freed
// on its own stream while that block's work is still queued, without a host
// wait: it makes a device barrier, so every stream's later work runs after
// the old work, and a block freed on another stream before the barrier gives
// its pages too. The old mappings stay until that work is done: both queued
// writes still land, in pages now the new block's, before the new owner's
// fill (on the requesting stream, so only the barrier orders it after the
// other stream's write); nothing is unmapped under them.
TEST_F(StreamSafety, StitchingForAStreamTakesPagesFreedOnItWithABarrierNotAWait) {
  use_barrier_allocator();
  constexpr std::size_t kPage = 2 * MiB;
  ASSERT_TRUE(allocator_->pool().set_device_limit(4 * kPage).ok());
  CUstream s = make_stream(CU_STREAM_NON_BLOCKING);
  CUstream t = make_stream(CU_STREAM_NON_BLOCKING);
  const auto key = reinterpret_cast<std::uintptr_t>(s);
  const auto other_key = reinterpret_cast<std::uintptr_t>(t);
  // [freed on s][kept][freed on t][kept]: the budget is full, and no free
  // block is big enough for two pages.
  auto freed = allocator_->allocate(kPage, key, true);
  auto kept = allocator_->allocate(kPage, key, true);
  auto other = allocator_->allocate(kPage, other_key, true);
  auto kept_too = allocator_->allocate(kPage, key, true);
  ASSERT_TRUE(freed.ok() && kept.ok() && other.ok() && kept_too.ok());
  testing::Gate gate;
  testing::Gate other_gate;
  ASSERT_EQ(testing::launch_gated_write(s, &gate, reinterpret_cast<int*>(freed.value()), 1), CUDA_SUCCESS);
  ASSERT_EQ(testing::launch_gated_write(t, &other_gate, reinterpret_cast<int*>(other.value()), 1), CUDA_SUCCESS);
  ASSERT_TRUE(allocator_->deallocate(freed.value(), key, true).ok());
  ASSERT_TRUE(allocator_->deallocate(other.value(), other_key, true).ok());
  std::thread opener = open_if_still_shut(gate);
  std::thread other_opener = open_if_still_shut(other_gate);
  // Two pages where none can be made: one from under each freed block.
  const pool::PoolStats before = allocator_->pool().stats();
  const std::uint64_t waits_before = host_waits();
  auto big = allocator_->allocate(2 * kPage, key, true);
  const std::uint64_t waits = host_waits() - waits_before;
  const pool::PoolStats after = allocator_->pool().stats();
  ASSERT_TRUE(big.ok()) << big.status().message();
  EXPECT_EQ(waits, 0u) << "stitching waited for a stream's queued write";
  EXPECT_EQ(after.stitching_barriers, before.stitching_barriers + 1);
  EXPECT_LE(after.reserved_bytes, 4 * kPage);
  ASSERT_EQ(api().memsetD8Async(static_cast<CUdeviceptr>(big.value()), 0x5a, 2 * kPage, s), CUDA_SUCCESS);
  // The requesting stream's own write lands, and its fill would run now if
  // nothing ordered it after the other stream's write.
  gate.release();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  other_gate.release();
  opener.join();
  other_opener.join();
  ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
  EXPECT_TRUE(filled_with(big.value(), 2 * kPage, 0x5a)) << "a queued write landed after the new owner's fill";
  EXPECT_EQ(testing::sim_control<std::uint64_t (*)()>("tidepool_sim_remap_faults")(), 0u)
      << "a page was unmapped under a queued write";
  EXPECT_TRUE(allocator_->deallocate(big.value(), key, true).ok());
  EXPECT_TRUE(allocator_->deallocate(kept.value(), key, true).ok());
  EXPECT_TRUE(allocator_->deallocate(kept_too.value(), key, true).ok());
  ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
  destroy_stream(t);
  destroy_stream(s);
}

// Stitching takes the page of a block freed on the legacy stream while its
// write is still queued, behind a barrier, and parks the old mapping: a
// barrier it makes (stream-ordered, as a program allocating on its default
// stream does), or the one a cudaFree-style free was put back behind. Once
// that write is done (no one tells the pool), a request over the old place
// must unmap the parked mapping, and asks first whether the work before the
// barrier is done. A record made when the page was parked says so, so the
// host waits for nothing; a record made only when asked would sit behind
// the newer work now queued on the stream, and the host would wait for all
// of it.
TEST_F(StreamSafety, AStitchingBarrierAnswersForItsParkedPagesLaterWithoutAWait) {
  expect_parked_page_answered_without_a_wait(/*ordered=*/true);
}

TEST_F(StreamSafety, ACudaFreeBarrierAnswersForPagesParkedBehindItLaterWithoutAWait) {
  expect_parked_page_answered_without_a_wait(/*ordered=*/false);
}

// A range whose page stitching took (its old work still queued) needs it
// back while that page lies idle where it went, under a free block: the page
// comes back and its mapping here becomes current again, with no map, no
// host wait and no detour to another block; the old work still lands first.
TEST_F(StreamSafety, APageIdleWhereItWentComesBackToItsOldPlace) {
  use_barrier_allocator();
  constexpr std::size_t kPage = 2 * MiB;
  ASSERT_TRUE(allocator_->pool().set_device_limit(4 * kPage).ok());
  auto freed = allocator_->allocate(kPage, 0, false);
  auto kept = allocator_->allocate(kPage, 0, false);
  auto held = allocator_->allocate(kPage, 0, false);  // one page of the budget left
  ASSERT_TRUE(freed.ok() && kept.ok() && held.ok());
  testing::Gate gate;
  ASSERT_EQ(testing::launch_gated_write(nullptr, &gate, reinterpret_cast<int*>(freed.value()), 1), CUDA_SUCCESS);
  ASSERT_TRUE(allocator_->deallocate(freed.value(), 0, false).ok());
  std::thread opener = open_if_still_shut(gate);
  // Two pages beyond the held block: a new one and the freed block's.
  auto moved = allocator_->allocate(2 * kPage, 0, false);
  ASSERT_TRUE(moved.ok()) << moved.status().message();
  ASSERT_NE(moved.value(), freed.value());
  ASSERT_TRUE(allocator_->deallocate(moved.value(), 0, false).ok());
  ASSERT_TRUE(allocator_->deallocate(kept.value(), 0, false).ok());
  // The old place is the best fit; the moved block's range, backed, is not.
  const pool::PoolStats before = allocator_->pool().stats();
  const std::uint64_t waits_before = host_waits();
  const std::uint64_t maps_before = calls("cuMemMap");
  auto again = allocator_->allocate(kPage, 0, false);
  const std::uint64_t waits = host_waits() - waits_before;
  const pool::PoolStats after = allocator_->pool().stats();
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again.value(), freed.value()) << "the request went elsewhere";
  EXPECT_EQ(waits, 0u);
  EXPECT_EQ(after.pending_page_waits, before.pending_page_waits);
  EXPECT_EQ(after.pending_page_detours, before.pending_page_detours);
  EXPECT_EQ(after.parked_reuses, before.parked_reuses + 1);
  EXPECT_EQ(calls("cuMemMap"), maps_before);
  ASSERT_EQ(api().memsetD8Async(static_cast<CUdeviceptr>(again.value()), 0x33, kPage, nullptr), CUDA_SUCCESS);
  gate.release();
  opener.join();
  ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
  EXPECT_TRUE(filled_with(again.value(), kPage, 0x33)) << "the queued write landed after the new owner's fill";
  EXPECT_EQ(testing::sim_control<std::uint64_t (*)()>("tidepool_sim_remap_faults")(), 0u)
      << "a page was unmapped under the queued write";
  EXPECT_TRUE(allocator_->deallocate(again.value(), 0, false).ok());
  EXPECT_TRUE(allocator_->deallocate(held.value(), 0, false).ok());
}

TEST_F(StreamSafety, ThePerThreadDefaultStreamIsAStreamPerThread) {
  const auto per_thread = reinterpret_cast<std::uintptr_t>(CU_STREAM_PER_THREAD);
  testing::Gate gate;
  std::uintptr_t freed = 0;
  std::thread first([&] {
    driver::ScopedContext scope(api(), allocator_->context());
    auto block = allocator_->allocate(4096, per_thread, true);
    ASSERT_TRUE(block.ok());
    freed = block.value();
    ASSERT_EQ(testing::launch_gated_write(CU_STREAM_PER_THREAD, &gate, reinterpret_cast<int*>(freed), 1), CUDA_SUCCESS);
    ASSERT_TRUE(allocator_->deallocate(freed, per_thread, true).ok());
  });
  first.join();
  // Another thread, on its own per-thread stream: reuse must wait for
  // thread 1's write, so thread 2's later write wins.
  std::thread second([&] {
    driver::ScopedContext scope(api(), allocator_->context());
    auto block = allocator_->allocate(4096, per_thread, true);
    ASSERT_TRUE(block.ok()) << block.status().message();
    testing::Gate open;
    open.release();
    ASSERT_EQ(testing::launch_gated_write(CU_STREAM_PER_THREAD, &open, reinterpret_cast<int*>(block.value()), 2),
              CUDA_SUCCESS);
    gate.release();
    ASSERT_EQ(api().streamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
    ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
    if (block.value() == freed) {
      EXPECT_EQ(*reinterpret_cast<int*>(block.value()), 2) << "thread 1's queued write landed after thread 2's";
    }
    EXPECT_TRUE(allocator_->deallocate(block.value(), per_thread, true).ok());
  });
  second.join();
}

TEST_F(StreamSafety, APerThreadFreeIsFencedForACudaMallocOnAnotherThread) {
  const auto per_thread = reinterpret_cast<std::uintptr_t>(CU_STREAM_PER_THREAD);
  testing::Gate gate;
  std::uintptr_t freed = 0;
  std::thread first([&] {
    driver::ScopedContext scope(api(), allocator_->context());
    auto block = allocator_->allocate(4096, per_thread, true);
    ASSERT_TRUE(block.ok());
    freed = block.value();
    std::memset(reinterpret_cast<void*>(freed), 0, 4096);
    ASSERT_EQ(testing::launch_gated_write(CU_STREAM_PER_THREAD, &gate, reinterpret_cast<int*>(freed), 1), CUDA_SUCCESS);
    ASSERT_TRUE(allocator_->deallocate(freed, per_thread, true).ok());
  });
  first.join();
  std::thread opener = open_later(gate);
  auto block = allocator_->allocate(4096, 0, false);
  const int seen = *reinterpret_cast<int*>(freed);
  opener.join();
  ASSERT_TRUE(block.ok());
  if (block.value() == freed) {
    EXPECT_EQ(seen, 1) << "handed out under thread 1's queued write";
  }
  EXPECT_TRUE(allocator_->deallocate(block.value(), 0, false).ok());
}

TEST_F(StreamSafety, BlocksFreedOnManyStreamsStayFencedPastSixtyFourStreams) {
  CUstream a = make_stream(CU_STREAM_NON_BLOCKING);
  CUstream b = make_stream(CU_STREAM_NON_BLOCKING);
  const auto sa = reinterpret_cast<std::uintptr_t>(a);
  const auto sb = reinterpret_cast<std::uintptr_t>(b);
  auto x = allocator_->allocate(2 * MiB, sa, true);
  auto y = allocator_->allocate(2 * MiB, sb, true);
  ASSERT_TRUE(x.ok() && y.ok());
  testing::Gate gate;
  ASSERT_EQ(testing::launch_gated_write(a, &gate, reinterpret_cast<int*>(x.value()), 1), CUDA_SUCCESS);
  ASSERT_TRUE(allocator_->deallocate(x.value(), sa, true).ok());
  ASSERT_TRUE(allocator_->deallocate(y.value(), sb, true).ok());
  std::vector<CUstream> others;
  for (int i = 0; i < 70; ++i) {
    CUstream s = make_stream(CU_STREAM_NON_BLOCKING);
    const auto key = reinterpret_cast<std::uintptr_t>(s);
    auto r = allocator_->allocate(512, key, true);
    ASSERT_TRUE(r.ok());
    ASSERT_TRUE(allocator_->deallocate(r.value(), key, true).ok());
    others.push_back(s);
  }
  CUstream c = make_stream(CU_STREAM_NON_BLOCKING);
  const auto sc = reinterpret_cast<std::uintptr_t>(c);
  auto z = allocator_->allocate(4 * MiB, sc, true);
  ASSERT_TRUE(z.ok());
  testing::Gate open;
  open.release();
  // Stream c writes 2 where stream a's pending write of 1 may go; c must wait.
  int* target = reinterpret_cast<int*>(x.value());
  const bool overlaps = z.value() <= x.value() && x.value() < z.value() + 4 * MiB;
  if (overlaps) {
    ASSERT_EQ(testing::launch_gated_write(c, &open, target, 2), CUDA_SUCCESS);
  }
  gate.release();
  ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
  if (overlaps) {
    EXPECT_EQ(*target, 2) << "stream a's write landed after stream c's";
  }
  EXPECT_TRUE(allocator_->deallocate(z.value(), sc, true).ok());
  for (CUstream s : others) destroy_stream(s);
  destroy_stream(a);
  destroy_stream(b);
  destroy_stream(c);
}

TEST_F(StreamSafety, PagesWhoseAccessGrantFailedAreNeverHandedOut) {
  inject_fault("cuMemSetAccess", 1, CUDA_ERROR_UNKNOWN);
  auto failed = allocator_->allocate(4 * MiB, 0, false);
  EXPECT_FALSE(failed.ok());
  auto next = allocator_->allocate(4 * MiB, 0, false);
  ASSERT_TRUE(next.ok()) << next.status().message();
  // A page recorded as mapped but not accessible would fault here.
  std::memset(reinterpret_cast<void*>(next.value()), 0x33, 4 * MiB);
  EXPECT_TRUE(filled_with(next.value(), 4 * MiB, 0x33));
  EXPECT_TRUE(allocator_->deallocate(next.value(), 0, false).ok());
}

TEST_F(StreamSafety, DestroyedAndBogusStreamHandlesAreRejectedAndChangeNothing) {
  CUstream s = make_stream(CU_STREAM_NON_BLOCKING);
  const auto key = reinterpret_cast<std::uintptr_t>(s);
  auto live = allocator_->allocate(4096, key, true);
  ASSERT_TRUE(live.ok());
  destroy_stream(s);
  auto on_dead = allocator_->allocate(4096, key, true);
  ASSERT_FALSE(on_dead.ok());
  EXPECT_EQ(on_dead.status().error(), util::Error::invalid_handle);
  auto free_on_dead = allocator_->deallocate(live.value(), key, true);
  EXPECT_EQ(free_on_dead.error(), util::Error::invalid_handle);
  EXPECT_TRUE(allocator_->pool().owns(live.value())) << "a refused free must leave the block allocated";
  auto bogus = allocator_->allocate(4096, 0xdead0000, true);
  ASSERT_FALSE(bogus.ok());
  EXPECT_EQ(bogus.status().error(), util::Error::invalid_handle);
  EXPECT_TRUE(allocator_->deallocate(live.value(), 0, false).ok());
}

TEST_F(StreamSafety, FreeMemoryReportedIsServableInOneRequest) {
  // Small blocks on every page of the budget, every other one freed: half
  // the budget is free, but no page is wholly free.
  std::vector<std::uintptr_t> blocks;
  for (int i = 0; i < 128; ++i) {
    auto r = allocator_->allocate(512 * 1024, 0, true);
    if (!r.ok()) break;
    blocks.push_back(r.value());
  }
  ASSERT_GE(blocks.size(), 64u);
  for (std::size_t i = 0; i < blocks.size(); i += 2) ASSERT_TRUE(allocator_->deallocate(blocks[i], 0, true).ok());
  std::size_t driver_free = 0;
  std::size_t driver_total = 0;
  ASSERT_EQ(api().memGetInfo(&driver_free, &driver_total), CUDA_SUCCESS);
  const std::size_t servable = allocator_->pool().servable_bytes(driver_free);
  if (servable > 0) {
    auto one = allocator_->allocate(servable, 0, true);
    EXPECT_TRUE(one.ok()) << "promised " << servable << " bytes but could not serve them";
    if (one.ok()) {
      EXPECT_TRUE(allocator_->deallocate(one.value(), 0, true).ok());
    }
  }
  auto beyond = allocator_->allocate(servable + 2 * MiB, 0, true);
  EXPECT_FALSE(beyond.ok()) << "the report understated what could be served";
  if (beyond.ok()) {
    EXPECT_TRUE(allocator_->deallocate(beyond.value(), 0, true).ok());
  }
  for (std::size_t i = 1; i < blocks.size(); i += 2) ASSERT_TRUE(allocator_->deallocate(blocks[i], 0, true).ok());
}

TEST_F(StreamSafety, PointerQueriesAnswerOnlyForLiveAllocationsWithUniqueBufferIds) {
  auto a = allocator_->allocate(1000, 0, true);
  ASSERT_TRUE(a.ok());
  std::uintptr_t base = 0;
  std::size_t size = 0;
  std::uint64_t id_a = 0;
  ASSERT_TRUE(allocator_->pool().find_containing(a.value() + 999, &base, &size, &id_a));
  EXPECT_EQ(base, a.value());
  EXPECT_EQ(size, 1000u);
  // Inside the block's rounding but past what was asked for: no allocation.
  EXPECT_FALSE(allocator_->pool().find_containing(a.value() + 1000, &base, &size));
  ASSERT_TRUE(allocator_->deallocate(a.value(), 0, true).ok());
  EXPECT_FALSE(allocator_->pool().find_containing(a.value(), &base, &size)) << "a freed address still answers";
  auto b = allocator_->allocate(1000, 0, true);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b.value(), a.value());
  std::uint64_t id_b = 0;
  ASSERT_TRUE(allocator_->pool().find_containing(b.value(), &base, &size, &id_b));
  EXPECT_NE(id_a, id_b) << "a reused address repeated its buffer id";
  EXPECT_TRUE(allocator_->deallocate(b.value(), 0, true).ok());
}

// Interior pointers are answered from a cache of the last block found per
// 2 MiB; the cache must follow frees, splits and reuse of the same range.
TEST_F(StreamSafety, InteriorPointerQueriesFollowTheBlocksAsTheyChange) {
  std::vector<std::uintptr_t> filler;  // many blocks in front: the walk the cache saves
  for (int i = 0; i < 64; ++i) {
    auto f = allocator_->allocate(4096, 0, true);
    ASSERT_TRUE(f.ok());
    filler.push_back(f.value());
  }
  auto a = allocator_->allocate(6 * MiB, 0, true);
  ASSERT_TRUE(a.ok());
  const std::uintptr_t inside = a.value() + 3 * MiB + 24;
  std::uintptr_t base = 0;
  std::size_t size = 0;
  for (int again = 0; again < 2; ++again) {  // a miss, then the cached answer
    ASSERT_TRUE(allocator_->pool().find_containing(inside, &base, &size));
    EXPECT_EQ(base, a.value());
    EXPECT_EQ(size, 6 * MiB);
  }
  ASSERT_TRUE(allocator_->deallocate(a.value(), 0, true).ok());
  EXPECT_FALSE(allocator_->pool().find_containing(inside, &base, &size)) << "a freed block still answers";
  // The same range, split differently: the answer is the block there now.
  auto low = allocator_->allocate(3 * MiB, 0, true);
  auto high = allocator_->allocate(3 * MiB, 0, true);
  ASSERT_TRUE(low.ok() && high.ok());
  for (const std::uintptr_t block : {low.value(), high.value()}) {
    ASSERT_TRUE(allocator_->pool().find_containing(block + MiB, &base, &size));
    EXPECT_EQ(base, block);
    EXPECT_EQ(size, 3 * MiB);
  }
  if (allocator_->pool().find_containing(inside, &base, &size)) {
    EXPECT_TRUE(base == low.value() || base == high.value());
    EXPECT_LT(inside, base + size);
    EXPECT_GE(inside, base);
  }
  for (std::uintptr_t p : {low.value(), high.value()}) ASSERT_TRUE(allocator_->deallocate(p, 0, true).ok());
  for (std::uintptr_t p : filler) ASSERT_TRUE(allocator_->deallocate(p, 0, true).ok());
}

TEST_F(StreamSafety, AStreamOfAnotherDeviceIsNeverFencedAsOneOfOurs) {
  CUcontext other = testing::second_device_context();
  if (other == nullptr) GTEST_SKIP() << "needs TIDEPOOL_SIM_DEVICES >= 2";
  const CUdevice other_device = 1;
  CUstream foreign = nullptr;
  {
    driver::ScopedContext there(api(), other);
    ASSERT_EQ(api().streamCreate(&foreign, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  }
  const auto key = reinterpret_cast<std::uintptr_t>(foreign);
  // cuMemAllocAsync takes memory from the stream's device: not this pool's.
  auto refused = allocator_->allocate(4096, key, true);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().error(), util::Error::other_device);
  // A free ordered on it waits for that stream's work before reuse. (Its
  // kernel reaches the block through peer access, as on a GPU.)
  ASSERT_TRUE(allocator_->set_peer_access(1, true).ok());
  auto block = allocator_->allocate(4096, 0, false);
  ASSERT_TRUE(block.ok());
  testing::Gate gate;
  {
    driver::ScopedContext there(api(), other);
    ASSERT_EQ(testing::launch_gated_write(foreign, &gate, reinterpret_cast<int*>(block.value()), 1), CUDA_SUCCESS);
  }
  std::thread opener = open_later(gate);
  ASSERT_TRUE(allocator_->deallocate(block.value(), key, true).ok());
  const int seen = *reinterpret_cast<int*>(block.value());
  opener.join();
  EXPECT_EQ(seen, 1) << "the free returned before the other device's stream finished with the block";
  {
    driver::ScopedContext there(api(), other);
    EXPECT_EQ(api().streamDestroy(foreign), CUDA_SUCCESS);
  }
  EXPECT_TRUE(allocator_->set_peer_access(1, false).ok());
  EXPECT_EQ(api().devicePrimaryCtxRelease(other_device), CUDA_SUCCESS);
}

TEST_F(StreamSafety, ACudaFreeLoopReusesFreedMemoryBeforeCreatingMore) {
  ASSERT_TRUE(allocator_->pool().set_device_limit(1024 * MiB).ok());
  for (int i = 0; i < 200; ++i) {
    auto r = allocator_->allocate(8 * MiB, 0, false);
    ASSERT_TRUE(r.ok()) << r.status().message();
    ASSERT_TRUE(allocator_->deallocate(r.value(), 0, false).ok());
    // The device catches up between steps (as it does in a training loop):
    // the fences made so far finish, and their blocks must be reused.
    ASSERT_EQ(api().streamSynchronize(nullptr), CUDA_SUCCESS);
  }
  // Each free is fenced at once and the device is past it by the next
  // allocation: one block is ever needed; without reuse, 200 would be made,
  // and with fences left open until memory runs short, more every cycle.
  EXPECT_LE(allocator_->pool().stats().peak_reserved_bytes, 16 * MiB);
}

// While all work is on the legacy stream, once a barrier was made in its
// order, a cudaFree-style free goes back at once: nothing is deferred, no
// driver call is made, the next allocation takes the block while the old
// owner's write is still queued, and a non-blocking stream created after
// it still starts behind that write.
TEST_F(StreamSafety, OnlyOnTheLegacyStreamACudaFreeGoesBackAtOnceBehindItsOrder) {
  expect_reused_in_legacy_order(/*freed_in_stream_order=*/false);
}

// The same for a block the legacy stream freed in its order (cudaFreeAsync
// on the default stream) and a cudaMalloc over it: no fence, no event, no
// host wait for the old owner's queued write.
TEST_F(StreamSafety, OnlyOnTheLegacyStreamACudaMallocTakesABlockItFreedInOrderWithoutAFence) {
  expect_reused_in_legacy_order(/*freed_in_stream_order=*/true);
}

TEST_F(StreamSafety, TheCachedSameStreamPairMakesNoDriverCall) {
  CUstream s = make_stream(CU_STREAM_NON_BLOCKING);
  const auto key = reinterpret_cast<std::uintptr_t>(s);
  auto warm = allocator_->allocate(4096, key, true);
  ASSERT_TRUE(warm.ok());
  ASSERT_TRUE(allocator_->deallocate(warm.value(), key, true).ok());
  auto count = testing::sim_control<decltype(&tidepool_sim_call_count)>("tidepool_sim_call_count");
  const char* calls[] = {"cuEventRecord", "cuEventQuery", "cuStreamGetCtx", "cuCtxGetCurrent", "cuStreamIsCapturing"};
  std::vector<std::uint64_t> before;
  for (const char* c : calls) before.push_back(count(c));
  for (int i = 0; i < 1000; ++i) {
    auto r = allocator_->allocate(4096, key, true);
    ASSERT_TRUE(r.ok());
    ASSERT_TRUE(allocator_->deallocate(r.value(), key, true).ok());
  }
  for (std::size_t i = 0; i < std::size(calls); ++i) EXPECT_EQ(count(calls[i]), before[i]) << calls[i];
  destroy_stream(s);
}

}  // namespace
}  // namespace tidepool
