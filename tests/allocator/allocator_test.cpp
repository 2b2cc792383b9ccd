// Specification of the Allocator (space + pool) on the simulated driver: for
// every placement policy, a randomised run checked against a reference model,
// plus out-of-memory behaviour, teardown, trim and the small/large split.
#include "runtime/allocator.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>

#include "pool/placement/policy.hpp"
#include "runtime/config.hpp"
#include "runtime/memory_info.hpp"
#include "support/sim_driver.hpp"
#include "support/sim_kernels.hpp"

namespace tidepool {
namespace {

using util::MiB;

std::size_t device_free_bytes() {
  const driver::Api& api = testing::sim_driver().api();
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  api.init(0);
  api.deviceGet(&dev, 0);
  api.devicePrimaryCtxRetain(&ctx, dev);
  driver::ScopedContext scope(api, ctx);
  std::size_t free_bytes = 0;
  std::size_t total = 0;
  api.memGetInfo(&free_bytes, &total);
  api.devicePrimaryCtxRelease(dev);
  return free_bytes;
}

std::unique_ptr<runtime::Allocator> make_allocator(const std::string& policy, std::size_t limit) {
  runtime::AllocatorOptions options;
  options.device_limit = limit;
  options.pool.policy = policy;
  auto created = runtime::Allocator::create(testing::sim_driver(), options);
  EXPECT_TRUE(created.ok()) << created.status().message();
  return created.ok() ? std::move(created.value()) : nullptr;
}

// Writes a pattern derived from `seed` over the block's head, tail and a
// sparse stride, so overlaps and lost contents are caught without touching
// every byte of large blocks.
void stamp(std::uintptr_t address, std::size_t size, std::uint32_t seed) {
  auto* bytes = reinterpret_cast<unsigned char*>(address);
  const std::size_t edge = std::min<std::size_t>(size, 4096);
  std::memset(bytes, static_cast<int>(seed & 0xff), edge);
  std::memset(bytes + size - edge, static_cast<int>((seed >> 8) & 0xff), edge);
  for (std::size_t off = edge; off + sizeof(seed) + edge <= size; off += 65536) {
    std::memcpy(bytes + off, &seed, sizeof(seed));
  }
}

bool stamp_intact(std::uintptr_t address, std::size_t size, std::uint32_t seed) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(address);
  const std::size_t edge = std::min<std::size_t>(size, 4096);
  for (std::size_t i = 0; i < edge; ++i) {
    if (bytes[size - edge + i] != ((seed >> 8) & 0xff)) return false;
  }
  for (std::size_t i = 0; i < edge && i < size - edge; ++i) {
    if (bytes[i] != (seed & 0xff)) return false;
  }
  for (std::size_t off = edge; off + sizeof(seed) + edge <= size; off += 65536) {
    std::uint32_t v = 0;
    std::memcpy(&v, bytes + off, sizeof(v));
    if (v != seed) return false;
  }
  return true;
}

class EveryPolicy : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryPolicy, RandomRunMatchesTheReferenceModel) {
  constexpr std::size_t kLimit = 256 * MiB;
  const std::size_t free_before = device_free_bytes();
  {
    auto allocator = make_allocator(GetParam(), kLimit);
    ASSERT_NE(allocator, nullptr);
    struct Live {
      std::size_t size;
      std::uint32_t seed;
    };
    std::map<std::uintptr_t, Live> live;  // the reference model
    std::size_t live_bytes = 0;
    std::mt19937_64 rng(1234);
    std::uint32_t next_seed = 1;

    for (int step = 0; step < 3000; ++step) {
      const bool do_alloc = live.empty() || rng() % 100 < 55;
      if (do_alloc) {
        // Log-uniform sizes from 1 B to 16 MiB: both arenas, every rounding.
        const double exponent = std::uniform_real_distribution<double>(0.0, 24.0)(rng);
        const std::size_t size = std::max<std::size_t>(1, static_cast<std::size_t>(std::exp2(exponent)));
        auto result = allocator->allocate(size, 0, true);
        if (!result) {
          EXPECT_EQ(result.status().error(), util::Error::out_of_memory);
          // With stitching, half the budget is always servable.
          EXPECT_GT(live_bytes + size, kLimit / 2) << "spurious OOM at step " << step;
          continue;
        }
        const std::uintptr_t address = result.value();
        ASSERT_NE(address, 0u);
        // Distinct and in bounds: no overlap with any live block.
        auto after = live.lower_bound(address);
        if (after != live.end()) {
          ASSERT_LE(address + size, after->first) << "overlap at step " << step;
        }
        if (after != live.begin()) {
          auto before = std::prev(after);
          ASSERT_LE(before->first + before->second.size, address) << "overlap at step " << step;
        }
        const std::uint32_t seed = next_seed++;
        stamp(address, size, seed);
        live.emplace(address, Live{size, seed});
        live_bytes += size;
      } else {
        auto it = live.begin();
        std::advance(it, static_cast<long>(rng() % live.size()));
        ASSERT_TRUE(stamp_intact(it->first, it->second.size, it->second.seed)) << "contents lost at step " << step;
        ASSERT_TRUE(allocator->deallocate(it->first, 0, true).ok());
        live_bytes -= it->second.size;
        live.erase(it);
      }
      if (step % 50 == 0) {
        const pool::PoolStats stats = allocator->pool().stats();
        ASSERT_LE(stats.reserved_bytes, kLimit) << "budget exceeded at step " << step;
        ASSERT_EQ(stats.live_bytes, live_bytes);
      }
    }
    for (const auto& [address, block] : live) {
      ASSERT_TRUE(stamp_intact(address, block.size, block.seed));
      ASSERT_TRUE(allocator->deallocate(address, 0, true).ok());
    }
    const pool::PoolStats stats = allocator->pool().stats();
    EXPECT_EQ(stats.live_bytes, 0u);
    EXPECT_EQ(stats.handed_out_bytes, 0u);
    EXPECT_LE(stats.peak_reserved_bytes, kLimit);
  }
  // Nothing leaks at teardown: the device has all its memory back.
  EXPECT_EQ(device_free_bytes(), free_before);
}

INSTANTIATE_TEST_SUITE_P(Policies, EveryPolicy,
                         ::testing::Values("best_fit", "first_fit", "next_fit", "worst_fit", "binned", "two_ended"),
                         [](const auto& info) { return info.param; });

TEST(Allocator, OutOfMemoryIsAnErrorAndThePoolStaysUsable) {
  auto allocator = make_allocator("best_fit", 64 * MiB);
  ASSERT_NE(allocator, nullptr);
  auto big = allocator->allocate(48 * MiB, 0, true);
  ASSERT_TRUE(big.ok());
  auto too_much = allocator->allocate(32 * MiB, 0, true);
  ASSERT_FALSE(too_much.ok());
  EXPECT_EQ(too_much.status().error(), util::Error::out_of_memory);
  EXPECT_EQ(allocator->pool().stats().ooms, 1u);
  ASSERT_TRUE(allocator->deallocate(big.value(), 0, true).ok());
  auto retry = allocator->allocate(32 * MiB, 0, true);
  EXPECT_TRUE(retry.ok());
  EXPECT_TRUE(allocator->deallocate(retry.value(), 0, true).ok());
}

TEST(Allocator, DoubleFreeAndForeignPointersAreRejectedWithoutHarm) {
  auto allocator = make_allocator("best_fit", 64 * MiB);
  ASSERT_NE(allocator, nullptr);
  auto a = allocator->allocate(1000, 0, true);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(allocator->deallocate(a.value(), 0, true).ok());
  EXPECT_EQ(allocator->deallocate(a.value(), 0, true).error(), util::Error::invalid_value);
  int on_host = 0;
  EXPECT_EQ(allocator->deallocate(reinterpret_cast<std::uintptr_t>(&on_host), 0, true).error(),
            util::Error::invalid_value);
  EXPECT_EQ(allocator->pool().stats().frees, 1u);
}

TEST(Allocator, SmallBlocksArePackedOnPagesOfTheirOwn) {
  auto allocator = make_allocator("best_fit", 256 * MiB);
  ASSERT_NE(allocator, nullptr);
  auto small1 = allocator->allocate(4096, 0, true);
  auto large = allocator->allocate(8 * MiB, 0, true);
  auto small2 = allocator->allocate(512, 0, true);
  ASSERT_TRUE(small1.ok() && large.ok() && small2.ok());
  // Consecutive small requests share a page; the large one lives elsewhere.
  EXPECT_EQ(small2.value(), small1.value() + 4096);
  const std::size_t page = allocator->space().page_size();
  EXPECT_NE(small1.value() / page, large.value() / page);
  EXPECT_EQ(allocator->pool().stats().reserved_bytes, page + 8 * MiB);
  for (auto p : {small1.value(), large.value(), small2.value()}) {
    EXPECT_TRUE(allocator->deallocate(p, 0, true).ok());
  }
}

TEST(Allocator, LargeBlocksAreAdjacentSubRangesNotWholePages) {
  auto allocator = make_allocator("best_fit", 256 * MiB);
  ASSERT_NE(allocator, nullptr);
  auto a = allocator->allocate(3 * MiB, 0, true);
  auto b = allocator->allocate(3 * MiB, 0, true);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(b.value(), a.value() + 3 * MiB);
  // 6 MiB live on exactly three 2 MiB pages.
  EXPECT_EQ(allocator->pool().stats().reserved_bytes, 6 * MiB);
  EXPECT_TRUE(allocator->deallocate(a.value(), 0, true).ok());
  EXPECT_TRUE(allocator->deallocate(b.value(), 0, true).ok());
}

TEST(Allocator, TrimReleasesEveryIdlePage) {
  auto allocator = make_allocator("best_fit", 256 * MiB);
  ASSERT_NE(allocator, nullptr);
  auto keep = allocator->allocate(2 * MiB, 0, true);
  auto drop = allocator->allocate(20 * MiB, 0, true);
  ASSERT_TRUE(keep.ok() && drop.ok());
  ASSERT_TRUE(allocator->deallocate(drop.value(), 0, true).ok());
  EXPECT_EQ(allocator->pool().stats().reserved_bytes, 22 * MiB);  // cached while free
  const std::size_t released = allocator->pool().trim();
  EXPECT_EQ(released, 20 * MiB);
  EXPECT_EQ(allocator->pool().stats().reserved_bytes, 2 * MiB);
  EXPECT_TRUE(allocator->deallocate(keep.value(), 0, true).ok());
}

TEST(Allocator, StitchingServesALargeRequestFromScatteredFreePages) {
  // Budget of 16 pages. Fill it with 2 MiB blocks, free every other one, then
  // ask for 16 MiB: no contiguous free range is mapped, but 8 idle pages are.
  auto allocator = make_allocator("best_fit", 32 * MiB);
  ASSERT_NE(allocator, nullptr);
  std::vector<std::uintptr_t> blocks;
  for (int i = 0; i < 16; ++i) {
    auto r = allocator->allocate(2 * MiB, 0, true);
    ASSERT_TRUE(r.ok()) << i;
    blocks.push_back(r.value());
  }
  for (std::size_t i = 0; i < blocks.size(); i += 2) ASSERT_TRUE(allocator->deallocate(blocks[i], 0, true).ok());
  auto big = allocator->allocate(16 * MiB, 0, true);
  ASSERT_TRUE(big.ok()) << big.status().message();
  stamp(big.value(), 16 * MiB, 77);
  EXPECT_TRUE(stamp_intact(big.value(), 16 * MiB, 77));
  EXPECT_LE(allocator->pool().stats().reserved_bytes, 32 * MiB);
  // The 8 idle pages moved: mapped a second time, under the new block.
  EXPECT_GE(allocator->pool().stats().maps, 16u + 8u);
  EXPECT_TRUE(allocator->deallocate(big.value(), 0, true).ok());
  for (std::size_t i = 1; i < blocks.size(); i += 2) EXPECT_TRUE(allocator->deallocate(blocks[i], 0, true).ok());
}

TEST(Allocator, StitchingTakesTheFreeTailsPagesFromTheEndCarvedLast) {
  // A budget of 16 pages. A hole without pages needs some, and the free tail
  // of the segment gives its far ones, so the next large request, carved
  // from the tail's near end, finds its pages still mapped.
  auto allocator = make_allocator("best_fit", 32 * MiB);
  ASSERT_NE(allocator, nullptr);
  const auto allocate = [&](std::size_t size) {
    auto r = allocator->allocate(size, 0, true);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? r.value() : 0;
  };
  const std::uintptr_t a = allocate(8 * MiB);     // pages 0-3
  const std::uintptr_t hole = allocate(8 * MiB);  // pages 4-7
  const std::uintptr_t b = allocate(4 * MiB);     // pages 8-9
  ASSERT_TRUE(allocator->deallocate(hole, 0, true).ok());
  ASSERT_EQ(allocator->pool().trim(), 8 * MiB);
  const std::uintptr_t tail_user = allocate(20 * MiB);  // only the tail fits: pages 10-19
  ASSERT_EQ(tail_user, b + 4 * MiB);
  ASSERT_EQ(allocator->pool().stats().reserved_bytes, 32 * MiB);
  ASSERT_TRUE(allocator->deallocate(tail_user, 0, true).ok());

  // The hole fits best; its 4 pages come from the tail's far end.
  const std::uint64_t maps_at_start = allocator->pool().stats().maps;
  const std::uintptr_t refill = allocate(8 * MiB);
  ASSERT_EQ(refill, hole);
  const std::uint64_t maps_before = allocator->pool().stats().maps;
  EXPECT_EQ(maps_before, maps_at_start + 4);  // stitched: the budget is full
  // Carved from the tail's near end, where all 6 pages are still mapped.
  const std::uintptr_t next = allocate(12 * MiB);
  ASSERT_EQ(next, tail_user);
  EXPECT_EQ(allocator->pool().stats().maps, maps_before);
  EXPECT_EQ(allocator->pool().stats().reserved_bytes, 32 * MiB);
  stamp(next, 12 * MiB, 5);
  stamp(refill, 8 * MiB, 6);
  EXPECT_TRUE(stamp_intact(next, 12 * MiB, 5));
  EXPECT_TRUE(stamp_intact(refill, 8 * MiB, 6));
  for (const std::uintptr_t p : {a, b, refill, next}) EXPECT_TRUE(allocator->deallocate(p, 0, true).ok());
}

TEST(Allocator, CudaFreeSemanticsDeferReuseUntilTheFenceCompletes) {
  auto allocator = make_allocator("best_fit", 64 * MiB);
  ASSERT_NE(allocator, nullptr);
  auto a = allocator->allocate(4 * MiB, 0, false);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(allocator->deallocate(a.value(), 0, false).ok());
  EXPECT_EQ(allocator->pool().stats().deferred_bytes, 4 * MiB);
  // Under a budget that leaves no room, the allocation must wait for the
  // fence and then reuse the block rather than fail.
  ASSERT_TRUE(allocator->pool().set_device_limit(4 * MiB).ok());
  auto b = allocator->allocate(4 * MiB, 0, false);
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b.value(), a.value());
  EXPECT_EQ(allocator->pool().stats().deferred_bytes, 0u);
  EXPECT_TRUE(allocator->deallocate(b.value(), 0, false).ok());
}

// Without eviction, live blocks cannot leave the device: a budget below them
// is refused and the old one stays, so the pool never holds more than the
// budget in force. Once enough is freed, the same budget holds at once, the
// freed pages given back to the driver.
TEST(Allocator, ABudgetBelowWhatIsLiveIsRefusedUntilFreesMakeRoom) {
  auto allocator = make_allocator("best_fit", 128 * MiB);
  ASSERT_NE(allocator, nullptr);
  std::vector<std::uintptr_t> blocks;
  for (std::uint32_t i = 0; i < 6; ++i) {
    auto r = allocator->allocate(8 * MiB, 0, false);
    ASSERT_TRUE(r.ok()) << r.status().message();
    stamp(r.value(), 8 * MiB, i);
    blocks.push_back(r.value());
  }
  const std::uint64_t held = allocator->pool().stats().reserved_bytes;
  ASSERT_GE(held, 48 * MiB);
  const util::Status refused = allocator->set_device_limit(16 * MiB);
  EXPECT_EQ(refused.error(), util::Error::out_of_memory) << refused.message();
  EXPECT_NE(std::string(refused.message()).find("eviction is off"), std::string::npos) << refused.message();
  EXPECT_EQ(allocator->space().device_limit(), 128 * MiB) << "a refused budget leaves the old one in force";
  EXPECT_EQ(allocator->pool().stats().reserved_bytes, held);
  const runtime::MemoryInfo board{4096 * MiB, 4096 * MiB};  // what the driver would say
  EXPECT_EQ(runtime::visible_memory(*allocator, board).total_bytes, 128 * MiB) << "cuMemGetInfo names the old budget";
  for (std::uint32_t i = 0; i < 6; ++i) EXPECT_TRUE(stamp_intact(blocks[i], 8 * MiB, i)) << i;

  // Free four (cudaFree-style: they wait for their fences), then lower again.
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(allocator->deallocate(blocks[static_cast<std::size_t>(i)], 0, false).ok());
  const util::Status lowered = allocator->set_device_limit(16 * MiB);
  ASSERT_TRUE(lowered.ok()) << lowered.message();
  EXPECT_EQ(allocator->space().device_limit(), 16 * MiB);
  EXPECT_LE(allocator->pool().stats().reserved_bytes, 16 * MiB);
  // cuMemGetInfo: the new budget, and nothing free in it (16 MiB live).
  const runtime::MemoryInfo seen = runtime::visible_memory(*allocator, board);
  EXPECT_EQ(seen.total_bytes, 16 * MiB);
  EXPECT_EQ(seen.free_bytes, 0u);
  for (std::uint32_t i = 4; i < 6; ++i) EXPECT_TRUE(stamp_intact(blocks[i], 8 * MiB, i)) << i;
  // Later allocations stay within it: one more 8 MiB block does not fit.
  auto over = allocator->allocate(8 * MiB, 0, false);
  EXPECT_FALSE(over.ok());
  EXPECT_LE(allocator->pool().stats().reserved_bytes, 16 * MiB);
  for (std::size_t i = 4; i < 6; ++i) ASSERT_TRUE(allocator->deallocate(blocks[i], 0, false).ok());
}

// One rule for a budget however it is set: what TIDEPOOL_CONF's
// device_limit refuses (less than one page, more than the device has), the
// allocator refuses too, and nothing changes.
TEST(Allocator, ABudgetTheConfigurationWouldRefuseIsRefusedAndChangesNothing) {
  auto allocator = make_allocator("best_fit", 64 * MiB);
  ASSERT_NE(allocator, nullptr);
  const std::size_t total = allocator->device_total_bytes();
  for (std::size_t bad : {std::size_t{0}, std::size_t{1}, 2 * MiB - 1, total + 1}) {
    const util::Status s = allocator->set_device_limit(bad);
    EXPECT_EQ(s.error(), util::Error::invalid_value) << bad << " bytes";
    EXPECT_NE(runtime::budget_problem(bad, total), nullptr) << bad << " bytes";
    EXPECT_EQ(allocator->space().device_limit(), 64 * MiB);
  }
  for (std::size_t good : {2 * MiB, total}) {
    EXPECT_TRUE(allocator->set_device_limit(good).ok()) << good << " bytes";
    EXPECT_EQ(runtime::budget_problem(good, total), nullptr);
    EXPECT_EQ(allocator->space().device_limit(), good);
  }
}

}  // namespace
}  // namespace tidepool

namespace tidepool {
namespace {

// A block freed on stream A while A's kernel still writes it must not be
// handed to stream B without B waiting: B's write must land after A's.
TEST(StreamOrderedReuse, CrossStreamReuseWaitsForTheFreeEvent) {
  const driver::Api& api = testing::sim_driver().api();
  auto allocator = make_allocator("best_fit", 64 * MiB);
  ASSERT_NE(allocator, nullptr);
  driver::ScopedContext scope(api, allocator->context());
  CUstream a = nullptr;
  CUstream b = nullptr;
  ASSERT_EQ(api.streamCreate(&a, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(api.streamCreate(&b, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  const auto sa = reinterpret_cast<std::uintptr_t>(a);
  const auto sb = reinterpret_cast<std::uintptr_t>(b);

  auto first = allocator->allocate(4096, sa, true);
  ASSERT_TRUE(first.ok());
  auto* cell = reinterpret_cast<int*>(first.value());
  *cell = 0;
  testing::Gate gate;
  ASSERT_EQ(testing::launch_gated_write(a, &gate, cell, 1), CUDA_SUCCESS);
  ASSERT_TRUE(allocator->deallocate(first.value(), sa, true).ok());

  auto second = allocator->allocate(4096, sb, true);
  ASSERT_TRUE(second.ok());
  ASSERT_EQ(second.value(), first.value());  // the same block, reused across streams
  testing::Gate open;
  open.release();
  ASSERT_EQ(testing::launch_gated_write(b, &open, cell, 2), CUDA_SUCCESS);
  gate.release();
  ASSERT_EQ(api.streamSynchronize(a), CUDA_SUCCESS);
  ASSERT_EQ(api.streamSynchronize(b), CUDA_SUCCESS);
  EXPECT_EQ(*cell, 2) << "stream B wrote before stream A's pending write finished";
  EXPECT_EQ(allocator->pool().stats().cross_stream_waits, 1u);
  EXPECT_TRUE(allocator->deallocate(second.value(), sb, true).ok());
  api.streamSynchronize(b);
  api.streamDestroy(a);
  api.streamDestroy(b);
}

TEST(StreamOrderedReuse, ABlockFreedOnADestroyedStreamWaitsForThatStreamsWork) {
  const driver::Api& api = testing::sim_driver().api();
  auto allocator = make_allocator("best_fit", 64 * MiB);
  ASSERT_NE(allocator, nullptr);
  driver::ScopedContext scope(api, allocator->context());
  CUstream a = nullptr;
  CUstream b = nullptr;
  ASSERT_EQ(api.streamCreate(&a, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(api.streamCreate(&b, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  auto first = allocator->allocate(4096, reinterpret_cast<std::uintptr_t>(a), true);
  ASSERT_TRUE(first.ok());
  auto* cell = reinterpret_cast<std::atomic<int>*>(first.value());
  cell->store(0);
  testing::Gate gate;
  ASSERT_EQ(testing::launch_gated_write(a, &gate, reinterpret_cast<int*>(cell), 1), CUDA_SUCCESS);
  ASSERT_TRUE(allocator->deallocate(first.value(), reinterpret_cast<std::uintptr_t>(a), true).ok());
  // Destroyed with its write still queued: the driver finishes it later.
  ASSERT_EQ(api.streamDestroy(a), CUDA_SUCCESS);
  std::thread opener([&gate] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    gate.release();
  });
  auto second = allocator->allocate(4096, reinterpret_cast<std::uintptr_t>(b), true);
  const int seen = cell->load();
  opener.join();
  ASSERT_TRUE(second.ok()) << second.status().message();
  EXPECT_EQ(second.value(), first.value());
  EXPECT_EQ(seen, 1) << "the block was handed out before the destroyed stream's write ran";
  EXPECT_TRUE(allocator->deallocate(second.value(), reinterpret_cast<std::uintptr_t>(b), true).ok());
  api.streamSynchronize(b);
  api.streamDestroy(b);
}

TEST(StreamOrderedReuse, SameStreamReuseIsImmediate) {
  const driver::Api& api = testing::sim_driver().api();
  auto allocator = make_allocator("best_fit", 64 * MiB);
  ASSERT_NE(allocator, nullptr);
  driver::ScopedContext scope(api, allocator->context());
  CUstream a = nullptr;
  ASSERT_EQ(api.streamCreate(&a, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  const auto sa = reinterpret_cast<std::uintptr_t>(a);
  auto first = allocator->allocate(4096, sa, true);
  ASSERT_TRUE(first.ok());
  testing::Gate gate;
  int* cell = reinterpret_cast<int*>(first.value());
  ASSERT_EQ(testing::launch_gated_write(a, &gate, cell, 1), CUDA_SUCCESS);
  ASSERT_TRUE(allocator->deallocate(first.value(), sa, true).ok());
  auto second = allocator->allocate(4096, sa, true);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second.value(), first.value());
  EXPECT_EQ(allocator->pool().stats().cross_stream_waits, 0u);
  gate.release();
  api.streamSynchronize(a);
  EXPECT_TRUE(allocator->deallocate(second.value(), sa, true).ok());
  api.streamDestroy(a);
}

// cudaFree semantics: a block freed while a kernel on a blocking stream still
// writes it is not handed out again until that kernel is done.
TEST(StreamOrderedReuse, CudaFreeDoesNotReuseUntilQueuedWorkCompletes) {
  const driver::Api& api = testing::sim_driver().api();
  auto allocator = make_allocator("best_fit", 64 * MiB);
  ASSERT_NE(allocator, nullptr);
  driver::ScopedContext scope(api, allocator->context());
  auto first = allocator->allocate(4096, 0, false);
  ASSERT_TRUE(first.ok());
  int* cell = reinterpret_cast<int*>(first.value());
  testing::Gate gate;
  ASSERT_EQ(testing::launch_gated_write(nullptr, &gate, cell, 1), CUDA_SUCCESS);
  ASSERT_TRUE(allocator->deallocate(first.value(), 0, false).ok());
  auto second = allocator->allocate(4096, 0, false);
  ASSERT_TRUE(second.ok());
  EXPECT_NE(second.value(), first.value()) << "reused while the kernel could still write it";
  gate.release();
  api.ctxSynchronize();
  EXPECT_TRUE(allocator->deallocate(second.value(), 0, false).ok());
}

}  // namespace
}  // namespace tidepool
