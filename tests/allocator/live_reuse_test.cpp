// The pool, live: freed memory is reused before the pool grows, a training
// loop settles into a layout that needs no remapping, and the page map's
// bitmap answers what a page-by-page scan would.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "runtime/allocator.hpp"
#include "sim/sim_control.h"
#include "space/reservation.hpp"
#include "support/sim_driver.hpp"

namespace tidepool {
namespace {

using util::MiB;

std::unique_ptr<runtime::Allocator> make_allocator(std::size_t limit) {
  runtime::AllocatorOptions options;
  options.device_limit = limit;
  auto created = runtime::Allocator::create(testing::sim_driver(), options);
  EXPECT_TRUE(created.ok()) << created.status().message();
  return created.ok() ? std::move(created.value()) : nullptr;
}

TEST(PageMap, NextMappedAndMappedPagesAgreeWithAScan) {
  constexpr std::size_t kPages = 300'000;  // several summary words
  space::Reservation r(0, kPages * 4096, 4096, false);
  std::vector<bool> mapped(kPages, false);
  std::mt19937 rng(7);
  // Sparse clusters and lone pages, then some unmapped again.
  for (int i = 0; i < 400; ++i) {
    const std::size_t at = rng() % kPages;
    const std::size_t run = 1 + rng() % (i % 10 == 0 ? 300 : 3);
    for (std::size_t p = at; p < std::min(kPages, at + run); ++p) {
      r.set_residency(p, space::Residency::device);
      mapped[p] = true;
    }
  }
  for (int i = 0; i < 200; ++i) {
    const std::size_t at = rng() % kPages;
    r.set_residency(at, space::Residency::unmapped);
    mapped[at] = false;
  }
  auto scan_next = [&](std::size_t from, std::size_t end) {
    for (std::size_t p = from; p < end; ++p) {
      if (mapped[p]) return p;
    }
    return end;
  };
  for (int i = 0; i < 2000; ++i) {
    std::size_t a = rng() % (kPages + 1);
    std::size_t b = rng() % (kPages + 1);
    if (a > b) std::swap(a, b);
    ASSERT_EQ(r.next_mapped(a, b), scan_next(a, b)) << a << " " << b;
    std::size_t count = 0;
    for (std::size_t p = a; p < b; ++p) count += mapped[p] ? 1 : 0;
    ASSERT_EQ(r.mapped_pages(a, b), count) << a << " " << b;
  }
  // Short ranges, as a block on a few pages asks: most within one word.
  for (int i = 0; i < 20000; ++i) {
    const std::size_t a = rng() % kPages;
    const std::size_t b = std::min(kPages, a + 1 + rng() % 70);
    std::size_t count = 0;
    for (std::size_t p = a; p < b; ++p) count += mapped[p] ? 1 : 0;
    ASSERT_EQ(r.mapped_pages(a, b), count) << a << " " << b;
  }
  // Broken pages count as mapped in the bitmap, and are counted apart.
  EXPECT_EQ(r.broken_pages(), 0u);
  r.set_residency(10, space::Residency::broken);
  r.set_residency(11, space::Residency::broken);
  r.set_residency(11, space::Residency::broken);
  EXPECT_EQ(r.broken_pages(), 2u);
  EXPECT_EQ(r.mapped_pages(10, 12), 2u);
  r.set_residency(10, space::Residency::unmapped);
  r.set_residency(11, space::Residency::device);
  EXPECT_EQ(r.broken_pages(), 0u);
  // Nothing mapped past the highest page ever mapped, and an empty range.
  EXPECT_EQ(r.next_mapped(r.mapped_limit(), kPages), kPages);
  EXPECT_EQ(r.next_mapped(5, 5), 5u);
}

// A kernel that keeps its stream busy for `*params[0]` microseconds, so the
// device lags the host as a real GPU does.
void busy_kernel(void** params, void* /*user*/) {
  const int micros = *static_cast<int*>(params[0]);
  std::this_thread::sleep_for(std::chrono::microseconds(micros));
}

CUfunction busy_function() {
  static CUfunction f = [] {
    CUfunction fn = nullptr;
    const std::size_t sizes[] = {sizeof(int)};
    auto reg = testing::sim_control<decltype(&tidepool_sim_register_kernel)>("tidepool_sim_register_kernel");
    EXPECT_EQ(reg(&fn, &busy_kernel, nullptr, 1, sizes), CUDA_SUCCESS);
    return fn;
  }();
  return f;
}

TEST(LiveReuse, CudaFreeWithTheDeviceBehindReusesRatherThanGrows) {
  // No budget to speak of: nothing forces reuse but the rule itself.
  auto allocator = make_allocator(1024 * MiB);
  ASSERT_NE(allocator, nullptr);
  const driver::Api& api = testing::sim_driver().api();
  driver::ScopedContext scope(api, allocator->context());
  int micros = 300;
  void* params[] = {&micros};
  for (int i = 0; i < 40; ++i) {
    auto block = allocator->allocate(8 * MiB, 0, /*ordered=*/false);
    ASSERT_TRUE(block.ok()) << block.status().message();
    // Work that uses the block is queued, then the block is freed at once.
    ASSERT_EQ(api.launchKernel(busy_function(), 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr), CUDA_SUCCESS);
    ASSERT_TRUE(allocator->deallocate(block.value(), 0, false).ok());
  }
  // Each allocation finds the previous free still fenced by running work: it
  // waits for that fence rather than mapping another 8 MiB.
  const pool::PoolStats stats = allocator->pool().stats();
  EXPECT_LE(stats.peak_reserved_bytes, 8 * MiB);
  EXPECT_EQ(stats.ooms, 0u);
  EXPECT_EQ(api.ctxSynchronize(), CUDA_SUCCESS);
}

// One step whose layout needs more pages than its peak live: y lands above
// x, and z, which does not fit in x's hole once x is freed, above y.
void outgrowing_step(runtime::Allocator& allocator) {
  auto x = allocator.allocate(4 * MiB, 0, true);
  auto y = allocator.allocate(4 * MiB, 0, true);
  ASSERT_TRUE(x.ok() && y.ok());
  ASSERT_TRUE(allocator.deallocate(x.value(), 0, true).ok());
  auto z = allocator.allocate(6 * MiB, 0, true);
  ASSERT_TRUE(z.ok());
  ASSERT_TRUE(allocator.deallocate(y.value(), 0, true).ok());
  ASSERT_TRUE(allocator.deallocate(z.value(), 0, true).ok());
}

TEST(LiveReuse, ATrainingLoopSettlesIntoALayoutThatNeedsNoRemapping) {
  // A long-lived 200 MiB block (the parameters) and a step whose layout
  // needs more pages than its peak live: y lands above x, and z, which does
  // not fit in x's hole, above y. Stitching first backs z with x's idle pages;
  // the next step needs them under x again. The pool learns to hold them.
  auto allocator = make_allocator(2048 * MiB);
  ASSERT_NE(allocator, nullptr);
  auto params = allocator->allocate(200 * MiB, 0, true);
  ASSERT_TRUE(params.ok());
  std::uint64_t unmaps_before_last = 0;
  std::uint64_t maps_before_last = 0;
  std::uint64_t first_step_peak = 0;
  constexpr int kSteps = 6;
  for (int step = 0; step < kSteps; ++step) {
    const pool::PoolStats before = allocator->pool().stats(false);
    if (step == kSteps - 1) {
      unmaps_before_last = before.unmaps;
      maps_before_last = before.maps;
    }
    ASSERT_NO_FATAL_FAILURE(outgrowing_step(*allocator));
    if (step == 0) first_step_peak = allocator->pool().stats(false).peak_reserved_bytes;
  }
  const pool::PoolStats last = allocator->pool().stats(false);
  // Without stitching, x, y and z would each have pages of their own.
  EXPECT_LT(first_step_peak, (200 + 4 + 4 + 6) * MiB) << "the first step reuses idle pages before creating new ones";
  EXPECT_EQ(last.maps - maps_before_last, 0u) << "the last step remaps nothing";
  EXPECT_EQ(last.unmaps - unmaps_before_last, 0u);
  // What it learned to hold stays within the slack over the peak live bytes.
  EXPECT_GE(last.utilization(), 0.97);
  EXPECT_TRUE(allocator->deallocate(params.value(), 0, true).ok());
}

TEST(LiveReuse, AlternatingASmallAndALargeBlockStopsMovingAPageBetweenArenas) {
  // The small block's page and the large block's pages can never be shared
  // for free (moving a page between them, even parked, costs fence checks on
  // every call): one page more than the peak live bytes is always allowed.
  auto allocator = make_allocator(2048 * MiB);
  ASSERT_NE(allocator, nullptr);
  for (int step = 0; step < 100; ++step) {
    const pool::PoolStats before = allocator->pool().stats(false);
    for (std::size_t size : {std::size_t{512}, 8 * MiB}) {
      auto block = allocator->allocate(size, 0, true);
      ASSERT_TRUE(block.ok()) << block.status().message();
      ASSERT_TRUE(allocator->deallocate(block.value(), 0, true).ok());
    }
    if (step < 10) continue;
    const pool::PoolStats after = allocator->pool().stats(false);
    ASSERT_EQ(after.maps, before.maps) << "step " << step;
    ASSERT_EQ(after.unmaps, before.unmaps) << "step " << step;
  }
  EXPECT_EQ(allocator->pool().stats(false).peak_reserved_bytes, 10 * MiB);
}

TEST(LiveReuse, ALayoutBeyondTheSlackKeepsUtilizationFirst) {
  // The same dance with no long-lived block: its layout would need 40% more
  // than its peak live, far past the slack, so the pool keeps stitching
  // rather than grow to it.
  auto allocator = make_allocator(2048 * MiB);
  ASSERT_NE(allocator, nullptr);
  for (int step = 0; step < 4; ++step) {
    ASSERT_NO_FATAL_FAILURE(outgrowing_step(*allocator));
  }
  // Peak live is y + z, 10 MiB; the layout would need 14. The pool holds at
  // most the peak live bytes and one page (the least slack it allows).
  const pool::PoolStats stats = allocator->pool().stats(false);
  EXPECT_LE(stats.peak_reserved_bytes, 12 * MiB);
}

}  // namespace
}  // namespace tidepool
