// Parked pages: a physical page the pool stops using stays mapped where it
// was, and comes back there for free. These tests hold the pool to the one
// rule that makes that safe: a page is in use at one place at most, so no two
// live blocks ever share bytes. The sim maps physical pages as shared memory,
// so a page in use at two places would show one block's bytes in the other.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "runtime/allocator.hpp"
#include "sim/sim_control.h"
#include "support/sim_driver.hpp"
#include "support/sim_kernels.hpp"

namespace tidepool {
namespace {

// A second device for the peer test: set by a static initialiser, before
// the sim is first opened and reads its environment (the other tests use
// device 0 only; an environment that already sets the count wins).
[[maybe_unused]] const bool kTwoDevices = [] {
  ::setenv("TIDEPOOL_SIM_DEVICES", "2", 0);
  return true;
}();

using util::MiB;

// No slack over the peak live bytes: pages that a layout needs at two places
// move between them rather than the pool growing (pool/stitcher.hpp).
std::unique_ptr<runtime::Allocator> make_allocator(std::size_t limit) {
  runtime::AllocatorOptions options;
  options.device_limit = limit;
  options.pool.hold_slack_percent = 0;
  auto created = runtime::Allocator::create(testing::sim_driver(), options);
  EXPECT_TRUE(created.ok()) << created.status().message();
  return created.ok() ? std::move(created.value()) : nullptr;
}

// One 64-bit word every 64 KiB, each naming its block and its offset, plus
// the block's last word: a page shared with another block shows up as a
// word that names the other one.
void fill_marks(std::uintptr_t address, std::size_t size, std::uint64_t owner) {
  for (std::size_t off = 0; off + 8 <= size; off += 64 * 1024) {
    const std::uint64_t mark = (owner << 32) ^ off;
    std::memcpy(reinterpret_cast<void*>(address + off), &mark, 8);
  }
  const std::uint64_t last = ~owner;
  std::memcpy(reinterpret_cast<void*>(address + size - 8), &last, 8);
}

bool marks_intact(std::uintptr_t address, std::size_t size, std::uint64_t owner) {
  for (std::size_t off = 0; off + 8 <= size; off += 64 * 1024) {
    std::uint64_t mark = 0;
    std::memcpy(&mark, reinterpret_cast<const void*>(address + off), 8);
    if (off + 8 > size - 8 && off < size) continue;  // overlaps the last word
    if (mark != ((owner << 32) ^ off)) return false;
  }
  std::uint64_t last = 0;
  std::memcpy(&last, reinterpret_cast<const void*>(address + size - 8), 8);
  return last == ~owner;
}

std::size_t sim_device_bytes() {
  return testing::sim_control<decltype(&tidepool_sim_device_bytes_in_use)>("tidepool_sim_device_bytes_in_use")();
}

struct Step {
  std::uintptr_t x = 0, z = 0;
};

// x and y side by side; x freed; z, too large for x's hole, lands above y
// and takes x's idle pages, which stay parked under x.
Step move_x_pages_under_z(runtime::Allocator& allocator, std::uintptr_t* y_out) {
  Step step;
  auto x = allocator.allocate(4 * MiB, 0, true);
  auto y = allocator.allocate(4 * MiB, 0, true);
  EXPECT_TRUE(x.ok() && y.ok());
  step.x = x.value();
  *y_out = y.value();
  EXPECT_TRUE(allocator.deallocate(x.value(), 0, true).ok());
  auto z = allocator.allocate(6 * MiB, 0, true);
  EXPECT_TRUE(z.ok());
  step.z = z.value();
  return step;
}

// A long-lived 200 MiB block below the step, as a model's parameters are.
class ParkedPagesUnderParams : public ::testing::Test {
 protected:
  void SetUp() override {
    allocator_ = make_allocator(2048 * MiB);
    ASSERT_NE(allocator_, nullptr);
    auto params = allocator_->allocate(200 * MiB, 0, true);
    ASSERT_TRUE(params.ok());
    params_ = params.value();
  }
  void TearDown() override {
    if (allocator_ != nullptr) {
      EXPECT_TRUE(allocator_->deallocate(params_, 0, true).ok());
    }
  }
  std::unique_ptr<runtime::Allocator> allocator_;
  std::uintptr_t params_ = 0;
};

TEST_F(ParkedPagesUnderParams, APageComesBackToWhereItWasParkedWithNoDriverCall) {
  auto& allocator = allocator_;
  std::uintptr_t y = 0;
  const Step first = move_x_pages_under_z(*allocator, &y);
  ASSERT_TRUE(allocator->deallocate(first.z, 0, true).ok());
  ASSERT_TRUE(allocator->deallocate(y, 0, true).ok());

  const pool::PoolStats before = allocator->pool().stats(false);
  auto x = allocator->allocate(4 * MiB, 0, true);  // x's place: its pages are parked there, idle under z
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(x.value(), first.x);
  const pool::PoolStats after = allocator->pool().stats(false);
  EXPECT_EQ(after.maps, before.maps);
  EXPECT_EQ(after.unmaps, before.unmaps);
  EXPECT_EQ(after.parked_reuses - before.parked_reuses, 2u);
  EXPECT_EQ(after.reserved_bytes, before.reserved_bytes);
  fill_marks(x.value(), 4 * MiB, 1);
  EXPECT_TRUE(marks_intact(x.value(), 4 * MiB, 1));
  EXPECT_TRUE(allocator->deallocate(x.value(), 0, true).ok());
}

TEST_F(ParkedPagesUnderParams, APageInUseElsewhereIsNeverHandedOutWhereItIsParked) {
  auto& allocator = allocator_;
  std::uintptr_t y = 0;
  const Step step = move_x_pages_under_z(*allocator, &y);
  fill_marks(step.z, 6 * MiB, 2);
  // x's hole again, while its old pages back z: it needs pages of its own.
  auto w = allocator->allocate(4 * MiB, 0, true);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w.value(), step.x);
  fill_marks(w.value(), 4 * MiB, 3);
  EXPECT_TRUE(marks_intact(step.z, 6 * MiB, 2)) << "w shares a page with z";
  EXPECT_TRUE(marks_intact(w.value(), 4 * MiB, 3));
  for (std::uintptr_t b : {w.value(), step.z, y}) EXPECT_TRUE(allocator->deallocate(b, 0, true).ok());
}

// Whether a kernel on device 1 writing `target` faults (the sim enforces
// each mapping's access list).
bool device_one_write_faults(std::uintptr_t target) {
  const driver::Api& api = testing::sim_driver().api();
  auto faults = testing::sim_control<std::uint64_t (*)()>("tidepool_sim_access_faults");
  CUcontext here = nullptr;
  CUcontext one = nullptr;
  EXPECT_EQ(api.ctxGetCurrent(&here), CUDA_SUCCESS);
  EXPECT_EQ(api.devicePrimaryCtxRetain(&one, 1), CUDA_SUCCESS);
  EXPECT_EQ(api.ctxSetCurrent(one), CUDA_SUCCESS);
  const std::uint64_t before = faults();
  testing::Gate open;
  open.release();
  EXPECT_EQ(testing::launch_gated_write(nullptr, &open, reinterpret_cast<int*>(target), 7), CUDA_SUCCESS);
  (void)api.ctxSynchronize();
  const bool faulted = faults() > before;
  if (faulted) testing::sim_control<void (*)()>("tidepool_sim_clear_faults")();
  EXPECT_EQ(api.ctxSetCurrent(here), CUDA_SUCCESS);
  EXPECT_EQ(api.devicePrimaryCtxRelease(1), CUDA_SUCCESS);
  return faulted;
}

// A peer granted access while a page is parked reaches it where it comes
// back for free: the grant covers parked mappings, not only current ones.
TEST_F(ParkedPagesUnderParams, APeerGrantedWhileAPageIsParkedReachesItWhereItComesBack) {
  int devices = 0;
  ASSERT_EQ(testing::sim_driver().api().deviceGetCount(&devices), CUDA_SUCCESS);
  if (devices < 2) GTEST_SKIP() << "needs TIDEPOOL_SIM_DEVICES >= 2";
  auto& allocator = allocator_;
  std::uintptr_t y = 0;
  const Step first = move_x_pages_under_z(*allocator, &y);
  ASSERT_TRUE(allocator->deallocate(first.z, 0, true).ok());
  ASSERT_TRUE(allocator->deallocate(y, 0, true).ok());
  EXPECT_TRUE(device_one_write_faults(params_));
  ASSERT_TRUE(allocator->set_peer_access(1, true).ok());
  EXPECT_FALSE(device_one_write_faults(params_));
  const pool::PoolStats before = allocator->pool().stats(false);
  auto x = allocator->allocate(4 * MiB, 0, true);
  ASSERT_TRUE(x.ok());
  ASSERT_EQ(x.value(), first.x);
  EXPECT_EQ(allocator->pool().stats(false).parked_reuses - before.parked_reuses, 2u);
  EXPECT_FALSE(device_one_write_faults(x.value()));
  EXPECT_FALSE(device_one_write_faults(x.value() + 4 * MiB - 4));
  ASSERT_TRUE(allocator->set_peer_access(1, false).ok());
  EXPECT_TRUE(device_one_write_faults(x.value()));
  EXPECT_TRUE(allocator->deallocate(x.value(), 0, true).ok());
}

// A working set under the slack's one page, one block in each arena in
// turn and freed cudaFree-style, while the device lags (a kernel holds the
// legacy stream, so no fence of the blocks' work completes in time): the
// page the large block took from the small one once is not moved back and
// forth on every call: the pool waits once for the work on it and holds a
// page more.
TEST(ParkedPages, ASmallWorkingSetAcrossBothArenasStopsMovingAPageWhileTheDeviceLags) {
  // As under the preload: cudaFree frees go back behind device barriers, the
  // registry known complete (its hooks see every stream).
  runtime::AllocatorOptions options;
  options.pool.free_barrier = true;
  auto created = runtime::Allocator::create(testing::sim_driver(), options);
  ASSERT_TRUE(created.ok()) << created.status().message();
  std::unique_ptr<runtime::Allocator> allocator = std::move(created.value());
  allocator->streams().set_complete(true);
  auto syncs = [count = testing::sim_control<decltype(&tidepool_sim_call_count)>("tidepool_sim_call_count")] {
    return count("cuEventSynchronize") + count("cuStreamSynchronize") + count("cuCtxSynchronize") +
           count("cuCtxSynchronize_v2");
  };
  const driver::Api& api = testing::sim_driver().api();
  CUcontext primary = nullptr;
  ASSERT_EQ(api.devicePrimaryCtxRetain(&primary, 0), CUDA_SUCCESS);
  ASSERT_EQ(api.ctxSetCurrent(primary), CUDA_SUCCESS);
  // The device lags the whole loop: a kernel holds the legacy stream until
  // the host waits for it, and another holds it again after that.
  testing::Gate gates[2];
  int written[2] = {0, 0};
  ASSERT_EQ(testing::launch_gated_write(nullptr, &gates[0], &written[0], 1), CUDA_SUCCESS);
  // Each gate opens once the host waits after it was closed: the counts
  // to compare with are read on this thread, before anything could wait.
  constexpr std::uint64_t kNotYet = UINT64_MAX;
  std::atomic<std::uint64_t> closed_at[2] = {syncs(), kNotYet};
  std::atomic<bool> first_open{false};
  std::atomic<bool> forced{false};  // a gate opened by the deadline: the loop blocked some other way
  struct Opener {
    std::atomic<bool> done{false};
    std::thread thread;
    ~Opener() {  // joined however the test ends
      done.store(true);
      if (thread.joinable()) thread.join();
    }
  } opener;
  opener.thread = std::thread([&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (int g = 0; g < 2; ++g) {
      while (!opener.done.load() && (closed_at[g].load() == kNotYet || syncs() <= closed_at[g].load())) {
        if (std::chrono::steady_clock::now() > deadline) {
          forced.store(true);
          break;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      first_open.store(true);  // before the release: the loop, let go, sees it
      gates[g].release();
    }
  });
  constexpr int kCalls = 40;
  std::vector<pool::PoolStats> after(kCalls);
  bool held_again = false;
  for (int i = 0; i < kCalls; ++i) {
    for (std::size_t size : {std::size_t{512}, 8 * MiB}) {
      auto b = allocator->allocate(size, 0, false);
      ASSERT_TRUE(b.ok()) << b.status().message();
      fill_marks(b.value(), size, static_cast<std::uint64_t>(i) + 1);
      ASSERT_TRUE(marks_intact(b.value(), size, static_cast<std::uint64_t>(i) + 1));
      ASSERT_TRUE(allocator->deallocate(b.value(), 0, false).ok());
    }
    if (!held_again && first_open.load()) {
      closed_at[1].store(syncs());
      ASSERT_EQ(testing::launch_gated_write(nullptr, &gates[1], &written[1], 2), CUDA_SUCCESS);
      held_again = true;
    }
    after[i] = allocator->pool().stats(false);
  }
  opener.done.store(true);
  opener.thread.join();
  EXPECT_FALSE(forced.load()) << "the loop blocked without a host wait the test could see";
  // Settled within the first calls: no page moves after them.
  const pool::PoolStats& settled = after[4];
  const pool::PoolStats& last = after[kCalls - 1];
  EXPECT_EQ(last.parked_reuses, settled.parked_reuses);
  EXPECT_EQ(last.maps, settled.maps);
  EXPECT_EQ(last.unmaps, settled.unmaps);
  EXPECT_LE(last.pending_page_waits, 1u);
  // The peak's four pages and the slack's one.
  EXPECT_EQ(last.reserved_bytes, 10 * MiB);
  EXPECT_EQ(api.ctxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(written[0], 1);
  EXPECT_EQ(written[1], held_again ? 2 : 0);
  EXPECT_EQ(api.devicePrimaryCtxRelease(0), CUDA_SUCCESS);
}

TEST(ParkedPages, RandomWorkUnderATightBudgetKeepsEveryLiveBlocksBytes) {
  // A budget a few times the largest block, random sizes and lifetimes, and
  // both kinds of free: pages move, park and come back all the time.
  auto allocator = make_allocator(48 * MiB);
  ASSERT_NE(allocator, nullptr);
  std::mt19937_64 rng(2026);
  std::map<std::uintptr_t, std::pair<std::size_t, std::uint64_t>> live;  // address -> (size, owner)
  std::uint64_t next_owner = 1;
  auto free_one = [&](std::map<std::uintptr_t, std::pair<std::size_t, std::uint64_t>>::iterator it) {
    ASSERT_TRUE(marks_intact(it->first, it->second.first, it->second.second)) << "block " << it->second.second;
    const bool ordered = (rng() % 2) == 0;
    ASSERT_TRUE(allocator->deallocate(it->first, 0, ordered).ok());
    live.erase(it);
  };
  for (int op = 0; op < 4000; ++op) {
    if (!live.empty() && (rng() % 100 < 45 || live.size() > 24)) {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      ASSERT_NO_FATAL_FAILURE(free_one(it));
      continue;
    }
    static constexpr std::size_t kSizes[] = {64 * 1024, 300 * 1024, 2 * MiB, 3 * MiB + 4096, 5 * MiB, 9 * MiB};
    const std::size_t size = kSizes[rng() % std::size(kSizes)];
    auto block = allocator->allocate(size, 0, true);
    if (!block.ok()) continue;  // over budget: fine, as long as nothing is lost
    fill_marks(block.value(), size, next_owner);
    live[block.value()] = {size, next_owner++};
    if (op % 64 == 0) {
      for (const auto& [address, entry] : live) {
        ASSERT_TRUE(marks_intact(address, entry.first, entry.second)) << "block " << entry.second << " at op " << op;
      }
    }
  }
  while (!live.empty()) ASSERT_NO_FATAL_FAILURE(free_one(live.begin()));
  const pool::PoolStats stats = allocator->pool().stats(false);
  EXPECT_GT(stats.parked_reuses, 0u) << "the run never brought a parked page back";
  EXPECT_LE(stats.peak_reserved_bytes, 48 * MiB);
}

TEST(ParkedPages, TrimGivesParkedPagesBackToTheDriver) {
  const std::size_t before = sim_device_bytes();
  {
    auto allocator = make_allocator(2048 * MiB);
    ASSERT_NE(allocator, nullptr);
    std::uintptr_t y = 0;
    const Step step = move_x_pages_under_z(*allocator, &y);
    ASSERT_TRUE(allocator->deallocate(step.z, 0, true).ok());
    ASSERT_TRUE(allocator->deallocate(y, 0, true).ok());
    allocator->pool().trim();
    EXPECT_EQ(allocator->pool().stats(false).reserved_bytes, 0u);
    EXPECT_EQ(sim_device_bytes(), before) << "a parked mapping kept released memory alive";
  }
  EXPECT_EQ(sim_device_bytes(), before);
}

TEST(ParkedPages, ADriverThatRefusesASecondMappingStopsParking) {
  auto allocator = make_allocator(2048 * MiB);
  ASSERT_NE(allocator, nullptr);
  auto inject = testing::sim_control<decltype(&tidepool_sim_inject_fault)>("tidepool_sim_inject_fault");
  auto x = allocator->allocate(4 * MiB, 0, true);
  auto y = allocator->allocate(4 * MiB, 0, true);
  ASSERT_TRUE(x.ok() && y.ok());
  ASSERT_TRUE(allocator->deallocate(x.value(), 0, true).ok());
  // z takes x's parked pages: the first map of one fails as a driver that
  // allows one mapping per page would.
  inject("cuMemMap", 1, CUDA_ERROR_INVALID_VALUE);
  auto z = allocator->allocate(6 * MiB, 0, true);
  ASSERT_TRUE(z.ok()) << z.status().message();
  EXPECT_FALSE(allocator->space().parks_pages());
  fill_marks(z.value(), 6 * MiB, 4);
  EXPECT_TRUE(marks_intact(z.value(), 6 * MiB, 4));
  // From here on pages the pool stops using are unmapped.
  const std::uint64_t unmaps = allocator->pool().stats(false).unmaps;
  auto w = allocator->allocate(4 * MiB, 0, true);
  ASSERT_TRUE(w.ok());
  fill_marks(w.value(), 4 * MiB, 5);
  EXPECT_TRUE(marks_intact(z.value(), 6 * MiB, 4));
  EXPECT_TRUE(marks_intact(w.value(), 4 * MiB, 5));
  for (std::uintptr_t b : {w.value(), z.value(), y.value()}) EXPECT_TRUE(allocator->deallocate(b, 0, true).ok());
  allocator->pool().trim();
  EXPECT_GT(allocator->pool().stats(false).unmaps, unmaps);
  testing::sim_control<decltype(&tidepool_sim_clear_faults)>("tidepool_sim_clear_faults")();
}

}  // namespace
}  // namespace tidepool
