// Property: whatever mix of streams, frees, memory pressure and failing fence
// calls a program produces, no live block's bytes are ever touched by work
// queued for its previous owner. A fixed seed and a bounded number of steps
// (and seconds) keep it repeatable and short in CI.
//
// Each step runs a few operations with slow work in flight (a host function
// that sleeps, then an asynchronous fill), then waits for the device and
// checks every byte of every live block against its owner's pattern. An old
// owner's fill that lands after reuse writes its own pattern over the new
// owner's and is caught there.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "runtime/allocator.hpp"
#include "sim/sim_control.h"
#include "support/sim_driver.hpp"

namespace tidepool {
namespace {

using util::MiB;

void sleep_briefly(void* /*user*/) { std::this_thread::sleep_for(std::chrono::microseconds(300)); }

struct Live {
  std::uintptr_t address;
  std::size_t size;
  unsigned char pattern;
  bool ordered;
  std::size_t stream;  // index into the stream table: where its work runs
};

TEST(StreamSafetyProperty, RandomWorkloadNeverTouchesALiveBlockWithAnOldOwnersWork) {
  const driver::Api& api = testing::sim_driver().api();
  runtime::AllocatorOptions options;
  options.device_limit = 16 * MiB;
  auto created = runtime::Allocator::create(testing::sim_driver(), options);
  ASSERT_TRUE(created.ok()) << created.status().message();
  auto& allocator = *created.value();
  allocator.streams().set_complete(true);
  driver::ScopedContext scope(api, allocator.context());
  auto inject = testing::sim_control<decltype(&tidepool_sim_inject_fault)>("tidepool_sim_inject_fault");
  auto clear = testing::sim_control<decltype(&tidepool_sim_clear_faults)>("tidepool_sim_clear_faults");

  // Slot 0: the legacy stream; 1: this thread's per-thread stream; then
  // created streams, blocking and not, some destroyed and replaced on the way.
  std::vector<CUstream> streams = {nullptr, CU_STREAM_PER_THREAD};
  auto make_stream = [&](unsigned flags) {
    CUstream s = nullptr;
    EXPECT_EQ(api.streamCreate(&s, flags), CUDA_SUCCESS);
    allocator.stream_created(s);
    return s;
  };
  for (int i = 0; i < 4; ++i) streams.push_back(make_stream(i % 2 == 0 ? CU_STREAM_NON_BLOCKING : 0));

  std::mt19937_64 rng(20261122);
  std::vector<Live> live;
  unsigned char next_pattern = 1;
  std::vector<unsigned char> expected;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  const char* fence_calls[] = {"cuEventRecord", "cuEventQuery", "cuEventSynchronize", "cuEventCreate",
                               "cuStreamWaitEvent"};
  int steps = 0;
  std::size_t reuses_checked = 0;

  for (; steps < 250 && std::chrono::steady_clock::now() < deadline; ++steps) {
    for (int op = 0; op < 4; ++op) {
      const unsigned roll = static_cast<unsigned>(rng() % 100);
      if (roll < 45 || live.empty()) {
        // Allocate, then fill on a stream: its own (stream order) or any.
        const double exponent = std::uniform_real_distribution<double>(8.0, 22.0)(rng);
        const auto size = static_cast<std::size_t>(std::exp2(exponent));
        const bool ordered = rng() % 2 == 0;
        const std::size_t slot = rng() % streams.size();
        auto r = allocator.allocate(size, reinterpret_cast<std::uintptr_t>(streams[slot]), ordered);
        if (!r.ok()) {
          ASSERT_EQ(r.status().error(), util::Error::out_of_memory) << r.status().message();
          continue;
        }
        for (const Live& other : live) {
          ASSERT_TRUE(r.value() + size <= other.address || other.address + other.size <= r.value())
              << "overlapping live blocks at step " << steps;
        }
        const unsigned char pattern = next_pattern;
        next_pattern = static_cast<unsigned char>(next_pattern % 250 + 1);
        ASSERT_EQ(api.memsetD8Async(r.value(), pattern, size, streams[slot]), CUDA_SUCCESS);
        live.push_back({r.value(), size, pattern, ordered, slot});
        ++reuses_checked;
      } else if (roll < 85) {
        // The owner's last write is still in flight when the block is freed.
        const std::size_t index = rng() % live.size();
        const Live block = live[index];
        std::size_t writer = block.stream;
        if (!block.ordered && rng() % 2 == 0) writer = rng() % streams.size();
        // A program orders a second stream's write after the first fill itself;
        // two unordered writers would be its own race, not the pool's.
        if (writer != block.stream) {
          ASSERT_EQ(api.streamSynchronize(streams[block.stream]), CUDA_SUCCESS);
        }
        ASSERT_EQ(api.memsetD8Async(block.address, block.pattern, block.size, streams[writer]), CUDA_SUCCESS);
        ASSERT_EQ(api.launchHostFunc(streams[writer], &sleep_briefly, nullptr), CUDA_SUCCESS);
        ASSERT_EQ(api.memsetD8Async(block.address, block.pattern, block.size, streams[writer]), CUDA_SUCCESS);
        const bool ordered = block.ordered && rng() % 4 != 0;
        ASSERT_TRUE(
            allocator.deallocate(block.address, reinterpret_cast<std::uintptr_t>(streams[writer]), ordered).ok());
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(index));
      } else if (roll < 92) {
        // Destroy a created stream with its work still queued, and replace it.
        const std::size_t slot = 2 + rng() % (streams.size() - 2);
        bool in_use = false;
        for (const Live& b : live) in_use = in_use || (b.stream == slot);
        if (in_use) continue;
        ASSERT_EQ(api.launchHostFunc(streams[slot], &sleep_briefly, nullptr), CUDA_SUCCESS);
        allocator.stream_destroying(streams[slot]);
        ASSERT_EQ(api.streamDestroy(streams[slot]), CUDA_SUCCESS);
        streams[slot] = make_stream(rng() % 2 == 0 ? CU_STREAM_NON_BLOCKING : 0);
      } else {
        // One of the next few fence calls fails.
        inject(fence_calls[rng() % std::size(fence_calls)], 1 + static_cast<unsigned>(rng() % 3), CUDA_ERROR_UNKNOWN);
      }
    }
    ASSERT_EQ(api.ctxSynchronize(), CUDA_SUCCESS);
    for (const Live& b : live) {
      expected.assign(b.size, b.pattern);
      ASSERT_EQ(std::memcmp(reinterpret_cast<const void*>(b.address), expected.data(), b.size), 0)
          << "a live block of " << b.size << " bytes was overwritten by an earlier owner's work at step " << steps;
    }
  }
  clear();
  EXPECT_GE(steps, 20) << "too few steps ran to mean anything";
  EXPECT_GT(reuses_checked, 50u);
  for (const Live& b : live) EXPECT_TRUE(allocator.deallocate(b.address, 0, false).ok());
  for (std::size_t i = 2; i < streams.size(); ++i) {
    allocator.stream_destroying(streams[i]);
    EXPECT_EQ(api.streamDestroy(streams[i]), CUDA_SUCCESS);
  }
}

}  // namespace
}  // namespace tidepool
