// Specification: under a device budget with evict:on, live data larger than
// the budget stays correct. Pages of idle blocks move to the pinned host
// cache and come back on hints or when handed out again; kernels that touch
// an evicted block still read and write the right bytes (over "PCIe", on the
// sim: the host page mapped at the same address); the budget is never
// exceeded, not even while moves are in flight; a full host cache is a clean
// out-of-memory; a failed driver call on any move loses nothing.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <random>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "residency/launch_scan.hpp"
#include "runtime/allocator.hpp"
#include "sim/sim_control.h"
#include "support/sim_driver.hpp"
#include "support/sim_kernels.hpp"

namespace tidepool {
namespace {

using util::MiB;

constexpr std::size_t kPage = 2 * MiB;

// Kernels: fill a block with a pattern derived from a seed, and count the
// words of a block that do not match one. A seed with kSparse set makes
// about half the words zero, as activations after a ReLU are, so that its
// pages compress.
constexpr std::uint32_t kSparse = 0x80000000u;
// TIDEPOOL_TEST_COMPRESS=zero|auto (the ctest residency_test_compressed):
// every allocator is made with compressed eviction, and all data compresses.
// A test's unscanned launches announce themselves first, as the preload's
// hook does, and its host reads make their blocks readable first, as a copy
// would; the ctest runs every test but CompressedEviction's own.
residency::CompressMode forced_compression() {
  static const residency::CompressMode mode = [] {
    const char* value = std::getenv("TIDEPOOL_TEST_COMPRESS");
    if (value == nullptr) return residency::CompressMode::off;
    if (std::string_view(value) == "zero") return residency::CompressMode::zero;
    if (std::string_view(value) == "auto") return residency::CompressMode::automatic;
    return residency::CompressMode::off;
  }();
  return mode;
}
std::uint32_t pattern(std::uint32_t seed, std::size_t i) {
  const std::uint32_t word = seed ^ static_cast<std::uint32_t>(i * 2654435761u);
  const bool sparse = (seed & kSparse) != 0 || forced_compression() != residency::CompressMode::off;
  return sparse && ((word >> 13) & 1U) != 0 ? 0 : word;
}

void fill_kernel(void** params, void* /*user*/) {
  auto* words = *static_cast<std::uint32_t**>(params[0]);
  const std::size_t count = *static_cast<std::size_t*>(params[1]);
  const std::uint32_t seed = *static_cast<std::uint32_t*>(params[2]);
  for (std::size_t i = 0; i < count; ++i) words[i] = pattern(seed, i);
}

void check_kernel(void** params, void* /*user*/) {
  const auto* words = *static_cast<const std::uint32_t**>(params[0]);
  const std::size_t count = *static_cast<std::size_t*>(params[1]);
  const std::uint32_t seed = *static_cast<std::uint32_t*>(params[2]);
  auto* errors = *static_cast<std::atomic<std::uint64_t>**>(params[3]);
  std::uint64_t bad = 0;
  for (std::size_t i = 0; i < count; ++i) bad += words[i] != pattern(seed, i) ? 1 : 0;
  errors->fetch_add(bad);
}

// A fill that takes a while, so that the host runs ahead of the device.
void slow_fill_kernel(void** params, void* user) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2);
  fill_kernel(params, user);
  std::this_thread::sleep_until(until);
}

// A layer: checks the blocks it reads (`in_a`, `in_b`; either may be null)
// and fills the one it writes, in one launch that names all three, slowly
// enough that the host runs ahead.
struct LayerArgs {
  std::uint32_t* in_a;
  std::uint32_t* in_b;
  std::uint32_t* out;
  std::size_t count;
  std::uint32_t seed_a;
  std::uint32_t seed_b;
  std::uint32_t seed_out;
  std::atomic<std::uint64_t>* errors;
};
void layer_kernel(void** params, void* /*user*/) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2);
  const std::size_t count = *static_cast<std::size_t*>(params[3]);
  std::uint64_t bad = 0;
  for (int in = 0; in < 2; ++in) {
    const auto* words = *static_cast<const std::uint32_t**>(params[in]);
    const std::uint32_t seed = *static_cast<std::uint32_t*>(params[4 + in]);
    for (std::size_t i = 0; words != nullptr && i < count; ++i) bad += words[i] != pattern(seed, i) ? 1 : 0;
  }
  auto* out = *static_cast<std::uint32_t**>(params[2]);
  const std::uint32_t seed_out = *static_cast<std::uint32_t*>(params[6]);
  for (std::size_t i = 0; i < count; ++i) out[i] = pattern(seed_out, i);
  (*static_cast<std::atomic<std::uint64_t>**>(params[7]))->fetch_add(bad);
  std::this_thread::sleep_until(until);
}

// A kernel given many blocks at once, as a struct by value (as fused
// optimizer kernels take their tensors): checks each against its seed.
constexpr std::size_t kManyBlocks = 14;  // more than a launch scan lists
struct ManyBlocks {
  std::uint32_t* block[kManyBlocks];
  std::size_t count;
  std::atomic<std::uint64_t>* errors;
};
void many_blocks_kernel(void** params, void* /*user*/) {
  const auto& args = *static_cast<const ManyBlocks*>(params[0]);
  std::uint64_t bad = 0;
  for (std::size_t b = 0; b < kManyBlocks; ++b) {
    for (std::size_t i = 0; i < args.count; ++i) bad += args.block[b][i] != pattern(static_cast<std::uint32_t>(b), i);
  }
  args.errors->fetch_add(bad);
}

CUfunction register_kernel_with(tidepool_sim_kernel_fn fn, std::initializer_list<std::size_t> sizes) {
  CUfunction f = nullptr;
  auto reg = testing::sim_control<decltype(&tidepool_sim_register_kernel)>("tidepool_sim_register_kernel");
  EXPECT_EQ(reg(&f, fn, nullptr, sizes.size(), std::data(sizes)), CUDA_SUCCESS);
  return f;
}
// The fill and check kernels: their first `params` of (words, count, seed, errors).
CUfunction register_kernel(tidepool_sim_kernel_fn fn, std::size_t params) {
  return params == 3
             ? register_kernel_with(fn, {sizeof(void*), sizeof(std::size_t), sizeof(std::uint32_t)})
             : register_kernel_with(fn, {sizeof(void*), sizeof(std::size_t), sizeof(std::uint32_t), sizeof(void*)});
}

CUfunction fill_function() {
  static CUfunction f = register_kernel(&fill_kernel, 3);
  return f;
}
CUfunction slow_fill_function() {
  static CUfunction f = register_kernel(&slow_fill_kernel, 3);
  return f;
}
CUfunction check_function() {
  static CUfunction f = register_kernel(&check_kernel, 4);
  return f;
}
CUfunction many_blocks_function() {
  static CUfunction f = register_kernel_with(&many_blocks_kernel, {sizeof(ManyBlocks)});
  return f;
}
CUfunction layer_function() {
  static CUfunction f = register_kernel_with(
      &layer_kernel, {sizeof(void*), sizeof(void*), sizeof(void*), sizeof(std::size_t), sizeof(std::uint32_t),
                      sizeof(std::uint32_t), sizeof(std::uint32_t), sizeof(void*)});
  return f;
}

std::size_t sim_device_bytes() {
  return testing::sim_control<decltype(&tidepool_sim_device_bytes_in_use)>("tidepool_sim_device_bytes_in_use")();
}
void inject_fault(const char* name, unsigned nth, CUresult result) {
  testing::sim_control<decltype(&tidepool_sim_inject_fault)>("tidepool_sim_inject_fault")(name, nth, result);
}
void clear_faults() { testing::sim_control<decltype(&tidepool_sim_clear_faults)>("tidepool_sim_clear_faults")(); }
// Host<->device copies take bytes / gbps of their stream's time (0: at once).
void set_copy_gbps(double gbps) {
  testing::sim_control<decltype(&tidepool_sim_set_copy_gbps)>("tidepool_sim_set_copy_gbps")(gbps);
}

// Watches the sim's device bytes on a thread for as long as it lives, and
// remembers the most it saw.
class BudgetWatch {
 public:
  BudgetWatch()
      : thread_([this] {
          while (!stop_.load()) {
            const std::size_t now = sim_device_bytes();
            std::size_t seen = peak_.load();
            while (now > seen && !peak_.compare_exchange_weak(seen, now)) {
            }
            std::this_thread::sleep_for(std::chrono::microseconds(50));
          }
        }) {}
  ~BudgetWatch() { stop(); }
  std::size_t stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
    return peak_.load();
  }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<std::size_t> peak_{0};
  std::thread thread_;
};

enum class Touch { neither, hints };

class Residency : public ::testing::Test {
 protected:
  void make(std::size_t limit, std::size_t host_cache = 0, bool complete_registry = true, bool learn = false,
            residency::CompressMode compress = residency::CompressMode::off) {
    runtime::AllocatorOptions options;
    options.device_limit = limit;
    options.evict = true;
    options.residency.learn = learn;
    options.residency.compress = compress != residency::CompressMode::off ? compress : forced_compression();
    options.residency.host_cache_bytes = host_cache;
    options.pool.pin_wait_ms = pin_wait_ms_;
    auto created = runtime::Allocator::create(testing::sim_driver(), options);
    ASSERT_TRUE(created.ok()) << created.status().message();
    allocator_ = std::move(created.value());
    ASSERT_NE(allocator_->residency(), nullptr) << allocator_->eviction_off_reason();
    allocator_->streams().set_complete(complete_registry);
    scope_ = std::make_unique<driver::ScopedContext>(api(), allocator_->context());
    ASSERT_EQ(api().streamCreate(&stream_, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    allocator_->stream_created(stream_);
  }
  void TearDown() override {
    clear_faults();
    set_copy_gbps(0);
    if (allocator_ == nullptr) return;
    (void)api().ctxSynchronize();
    allocator_->stream_destroying(stream_);
    (void)api().streamDestroy(stream_);
    scope_.reset();
    allocator_.reset();
  }
  static const driver::Api& api() { return testing::sim_driver().api(); }

  // Launches tidepool does not scan: under compressed eviction each is
  // announced first, as the preload announces a launch it cannot read (the
  // first one ends compression and makes every page readable).
  CUresult fill(std::uintptr_t block, std::size_t bytes, std::uint32_t seed) {
    return launch_fill(stream_, block, bytes, seed);
  }
  CUresult check(std::uintptr_t block, std::size_t bytes, std::uint32_t seed) {
    return launch_check(stream_, block, bytes, seed);
  }
  void unscanned_launch() {
    if (allocator_ != nullptr && allocator_->residency() != nullptr && allocator_->residency()->compressing()) {
      allocator_->unread_launch();
    }
  }
  CUresult launch_fill(CUstream stream, std::uintptr_t block, std::size_t bytes, std::uint32_t seed) {
    unscanned_launch();
    auto* words = reinterpret_cast<std::uint32_t*>(block);
    std::size_t count = bytes / 4;
    void* params[] = {&words, &count, &seed};
    return api().launchKernel(fill_function(), 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr);
  }
  CUresult launch_check(CUstream stream, std::uintptr_t block, std::size_t bytes, std::uint32_t seed) {
    unscanned_launch();
    auto* words = reinterpret_cast<std::uint32_t*>(block);
    std::size_t count = bytes / 4;
    std::atomic<std::uint64_t>* errors = &errors_;
    void* params[] = {&words, &count, &seed, &errors};
    return api().launchKernel(check_function(), 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr);
  }
  // The host reads a block through the sim's back door: where pages may be
  // compressed, the block is first made readable as a copy out of it would.
  std::uint64_t host_mismatches(std::uintptr_t block, std::size_t bytes, std::uint32_t seed) {
    if (allocator_ != nullptr && allocator_->residency() != nullptr &&
        allocator_->residency()->stats().compression.compressed_now > 0) {
      pool::Pins pins;
      EXPECT_TRUE(allocator_->use_in_copy(block, stream_, &pins, pool::Pool::OnHost::read_there));
      allocator_->release_pins(pins);
    }
    const auto* words = reinterpret_cast<const std::uint32_t*>(block);
    std::uint64_t bad = 0;
    for (std::size_t i = 0; i < bytes / 4; ++i) bad += words[i] != pattern(seed, i) ? 1 : 0;
    return bad;
  }

  // Live data of `blocks` x `bytes` under the budget: written by kernels,
  // then touched in random order by kernels that check and rewrite it.
  void run_integrity(std::size_t blocks, std::size_t bytes, Touch touch) {
    BudgetWatch watch;
    std::vector<std::uintptr_t> live;
    std::vector<std::uint32_t> seeds;
    for (std::size_t b = 0; b < blocks; ++b) {
      auto got = allocator_->allocate(bytes, 0, false);
      ASSERT_TRUE(got.ok()) << "block " << b << ": " << got.status().message();
      live.push_back(got.value());
      seeds.push_back(static_cast<std::uint32_t>(0x1000 + b));
      ASSERT_EQ(fill(live.back(), bytes, seeds.back()), CUDA_SUCCESS);
    }
    std::mt19937 random(42);
    for (int round = 0; round < 48; ++round) {
      const std::size_t b = random() % blocks;
      if (touch == Touch::hints) {
        // Out of room is allowed: pages left on the host are still correct.
        const util::Status hinted =
            allocator_->pool().make_resident(live[b], bytes, reinterpret_cast<std::uintptr_t>(stream_));
        ASSERT_TRUE(hinted.ok() || hinted.error() == util::Error::out_of_memory) << hinted.message();
      }
      ASSERT_EQ(check(live[b], bytes, seeds[b]), CUDA_SUCCESS);
      seeds[b] += 7919;
      ASSERT_EQ(fill(live[b], bytes, seeds[b]), CUDA_SUCCESS);
      if (round % 8 == 7) {
        // Fresh allocations keep evicting while the kernels run.
        auto extra = allocator_->allocate(bytes, 0, false);
        ASSERT_TRUE(extra.ok()) << extra.status().message();
        ASSERT_EQ(fill(extra.value(), bytes, 99), CUDA_SUCCESS);
        ASSERT_TRUE(allocator_->deallocate(extra.value(), 0, false).ok());
      }
    }
    for (std::size_t b = 0; b < blocks; ++b) ASSERT_EQ(check(live[b], bytes, seeds[b]), CUDA_SUCCESS);
    ASSERT_EQ(api().streamSynchronize(stream_), CUDA_SUCCESS);
    EXPECT_EQ(errors_.load(), 0u) << "words that kernels found wrong";
    for (std::size_t b = 0; b < blocks; ++b) {
      EXPECT_EQ(host_mismatches(live[b], bytes, seeds[b]), 0u) << "block " << b;
    }
    const std::size_t peak = watch.stop();
    EXPECT_LE(peak, allocator_->space().device_limit()) << "device bytes over the budget";
    const auto stats = allocator_->residency()->stats();
    EXPECT_GT(stats.evictions, 0u);
    EXPECT_GE(stats.evicted_bytes, (blocks * bytes - allocator_->space().device_limit()));
    if (touch == Touch::hints) {
      EXPECT_GT(stats.prefetches, 0u);
    }
    EXPECT_LE(stats.host_cache_peak_bytes, stats.peak_evicted_bytes + stats.peak_evicted_bytes / 10);
    for (std::uintptr_t p : live) ASSERT_TRUE(allocator_->deallocate(p, 0, false).ok());
  }

  // A launch as the preload makes it under prefetch:launch/learn: its
  // parameters are scanned for pool blocks first.
  CUresult launch_scanned(CUfunction f, void** params) {
    runtime::LaunchUse use;
    pool::Pins pins;
    scanner_.for_each_word(f, params, nullptr, [&](std::uintptr_t word) {
      (void)allocator_->use_in_launch(word, stream_, &use, &pins, pool::Pool::OnHost::bring_back_later);
    });
    allocator_->end_launch(f, use, stream_);
    const CUresult launched = api().launchKernel(f, 1, 1, 1, 1, 1, 1, 0, stream_, params, nullptr);
    allocator_->release_pins(pins);
    return launched;
  }
  CUresult scanned_fill(std::uintptr_t block, std::size_t bytes, std::uint32_t seed) {
    auto* words = reinterpret_cast<std::uint32_t*>(block);
    std::size_t count = bytes / 4;
    void* params[] = {&words, &count, &seed};
    return launch_scanned(fill_function(), params);
  }
  CUresult scanned_slow_fill(std::uintptr_t block, std::size_t bytes, std::uint32_t seed) {
    auto* words = reinterpret_cast<std::uint32_t*>(block);
    std::size_t count = bytes / 4;
    void* params[] = {&words, &count, &seed};
    return launch_scanned(slow_fill_function(), params);
  }
  CUresult scanned_check(std::uintptr_t block, std::size_t bytes, std::uint32_t seed) {
    auto* words = reinterpret_cast<std::uint32_t*>(block);
    std::size_t count = bytes / 4;
    std::atomic<std::uint64_t>* errors = &errors_;
    void* params[] = {&words, &count, &seed, &errors};
    return launch_scanned(check_function(), params);
  }

  // A training-like step of scanned launches: `layers` activations filled
  // forward, each checked by the next layer; then backward, each activation
  // checked (and, with `rewrite`, rewritten and checked again), a gradient
  // filled from the one above, and blocks freed after their last use.
  // `unread_after`: after the forward launch of that layer, the runtime's
  // call for a launch the scan could not read.
  void learned_step(int step, int layers, std::size_t bytes, bool rewrite = false, int unread_after = -1) {
    const auto seed = [&](int layer, int kind) { return static_cast<std::uint32_t>(1000 * step + 10 * layer + kind); };
    std::vector<std::uintptr_t> activation;
    for (int i = 0; i < layers; ++i) {
      auto got = allocator_->allocate(bytes, 0, false);
      ASSERT_TRUE(got.ok()) << "step " << step << " layer " << i << ": " << got.status().message();
      activation.push_back(got.value());
      if (i > 0) {
        ASSERT_EQ(scanned_check(activation[static_cast<std::size_t>(i - 1)], bytes, seed(i - 1, 0)), CUDA_SUCCESS);
      }
      ASSERT_EQ(scanned_slow_fill(activation.back(), bytes, seed(i, 0)), CUDA_SUCCESS);
      if (i == unread_after) {
        allocator_->unread_launch();
        unread_stats_ = allocator_->residency()->stats();
      }
    }
    std::uintptr_t upper = 0;
    for (int i = layers - 1; i >= 0; --i) {
      auto gradient = allocator_->allocate(bytes, 0, false);
      ASSERT_TRUE(gradient.ok()) << "step " << step << " backward " << i << ": " << gradient.status().message();
      const std::uintptr_t a = activation[static_cast<std::size_t>(i)];
      ASSERT_EQ(scanned_check(a, bytes, seed(i, 0)), CUDA_SUCCESS);
      if (rewrite) {
        ASSERT_EQ(scanned_slow_fill(a, bytes, seed(i, 2)), CUDA_SUCCESS);
        ASSERT_EQ(scanned_check(a, bytes, seed(i, 2)), CUDA_SUCCESS);
      }
      if (upper != 0) {
        ASSERT_EQ(scanned_check(upper, bytes, seed(i + 1, 1)), CUDA_SUCCESS);
      }
      ASSERT_EQ(scanned_slow_fill(gradient.value(), bytes, seed(i, 1)), CUDA_SUCCESS);
      ASSERT_TRUE(allocator_->deallocate(a, 0, false).ok());
      if (upper != 0) {
        ASSERT_TRUE(allocator_->deallocate(upper, 0, false).ok());
      }
      upper = gradient.value();
    }
    ASSERT_TRUE(allocator_->deallocate(upper, 0, false).ok());
  }

  residency::ResidencyStats unread_stats_{};  // learned_step's, just after its unread launch

  CUresult scanned_layer(LayerArgs args) {
    void* params[] = {&args.in_a,   &args.in_b,   &args.out,      &args.count,
                      &args.seed_a, &args.seed_b, &args.seed_out, &args.errors};
    return launch_scanned(layer_function(), params);
  }

  residency::LaunchScanner scanner_{api()};
  std::unique_ptr<runtime::Allocator> allocator_;
  std::unique_ptr<driver::ScopedContext> scope_;
  CUstream stream_ = nullptr;
  // `count` blocks of `bytes`, the i-th filled by a kernel with seed i + 1.
  std::vector<std::uintptr_t> fill_blocks(std::size_t count, std::size_t bytes) {
    std::vector<std::uintptr_t> blocks;
    for (std::size_t i = 0; i < count; ++i) {
      auto got = allocator_->allocate(bytes, 0, false);
      EXPECT_TRUE(got.ok()) << got.status().message();
      if (!got.ok()) break;
      EXPECT_EQ(fill(got.value(), bytes, static_cast<std::uint32_t>(i + 1)), CUDA_SUCCESS);
      blocks.push_back(got.value());
    }
    return blocks;
  }
  // Queues a check of each of fill_blocks' blocks.
  void expect_blocks_intact(const std::vector<std::uintptr_t>& blocks, std::size_t bytes) {
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      EXPECT_EQ(check(blocks[i], bytes, static_cast<std::uint32_t>(i + 1)), CUDA_SUCCESS);
    }
  }
  std::atomic<std::uint64_t> errors_{0};
  std::uint32_t pin_wait_ms_ = pool::PoolOptions{}.pin_wait_ms;  // make() reads it
};

TEST_F(Residency, LiveDataFourTimesTheBudgetStaysIntactTouchedByKernels) {
  make(16 * MiB);
  run_integrity(8, 8 * MiB, Touch::neither);
}

TEST_F(Residency, LiveDataFourTimesTheBudgetStaysIntactWithHints) {
  make(16 * MiB);
  run_integrity(8, 8 * MiB, Touch::hints);
}

TEST_F(Residency, WithoutACompleteRegistryMovesFallBackToASynchronisationAndStayIntact) {
  make(16 * MiB, 0, /*complete_registry=*/false);
  run_integrity(8, 8 * MiB, Touch::hints);
  EXPECT_GT(allocator_->residency()->stats().fallbacks, 0u);
}

// prefetch:learn: training-like steps whose activations are 4x the budget,
// every launch scanned as the preload scans it. Once the schedule has found
// the step, blocks move as tracked moves (no gate): copied out ahead of the
// allocations that evict them and brought back ahead of the launches that
// read them. Every byte is checked by kernels and on the host.
TEST_F(Residency, LearnedPrefetchKeepsTrainingStepsIntactUnderTheBudget) {
  constexpr std::size_t kBytes = 2 * kPage;
  constexpr int kLayers = 8;
  make(kLayers * kBytes / 4 + 4 * kPage, 0, true, /*learn=*/true);
  BudgetWatch watch;
  auto weight = allocator_->allocate(kPage, 0, false);
  ASSERT_TRUE(weight.ok());
  ASSERT_EQ(scanned_fill(weight.value(), kPage, 7), CUDA_SUCCESS);
  for (int step = 0; step < 6; ++step) {
    std::vector<std::uintptr_t> activation;
    for (int i = 0; i < kLayers; ++i) {
      auto got = allocator_->allocate(kBytes, 0, false);
      ASSERT_TRUE(got.ok()) << "step " << step << " layer " << i << ": " << got.status().message();
      activation.push_back(got.value());
      ASSERT_EQ(scanned_check(weight.value(), kPage, 7), CUDA_SUCCESS);
      ASSERT_EQ(scanned_fill(activation.back(), kBytes, static_cast<std::uint32_t>(100 * step + i)), CUDA_SUCCESS);
    }
    for (int i = kLayers - 1; i >= 0; --i) {
      const std::uintptr_t a = activation[static_cast<std::size_t>(i)];
      ASSERT_EQ(scanned_check(a, kBytes, static_cast<std::uint32_t>(100 * step + i)), CUDA_SUCCESS);
      if (i == 0) {
        // The host reads it too, where it lies.
        ASSERT_EQ(api().streamSynchronize(stream_), CUDA_SUCCESS);
        EXPECT_EQ(host_mismatches(a, kBytes, static_cast<std::uint32_t>(100 * step + i)), 0u) << "step " << step;
      }
      ASSERT_TRUE(allocator_->deallocate(a, 0, false).ok());
    }
  }
  ASSERT_EQ(api().streamSynchronize(stream_), CUDA_SUCCESS);
  EXPECT_EQ(errors_.load(), 0u) << "words that kernels found wrong";
  EXPECT_EQ(host_mismatches(weight.value(), kPage, 7), 0u);
  EXPECT_LE(watch.stop(), allocator_->space().device_limit()) << "device bytes over the budget";
  const auto stats = allocator_->residency()->stats();
  EXPECT_EQ(stats.learned_period, 3u * kLayers) << "a check and a fill per forward layer, a check per backward one";
  EXPECT_GT(stats.tracked_moves, 0u);
  EXPECT_GT(stats.precopies_used, 0u);
  EXPECT_EQ(stats.failed_moves, 0u);
  EXPECT_LE(stats.host_cache_peak_bytes, stats.peak_evicted_bytes + stats.peak_evicted_bytes / 10);
  ASSERT_TRUE(allocator_->deallocate(weight.value(), 0, false).ok());
}

// prefetch:learn once it has the step: a training step at half its peak,
// with kernels slow enough that the host runs ahead of the device (as a
// framework's host does), moves every block without a gate. The forward
// pass copies out ahead what its allocations evict; the backward pass brings
// activations back ahead of their kernels into the pages of blocks freed a
// launch before, the host waiting for the work before those frees rather
// than gating the device. Every byte is checked by the kernels.
TEST_F(Residency, LearnedStepsMoveEveryBlockWithoutAGateOnceTheStepIsKnown) {
  constexpr std::size_t kBytes = 2 * kPage;
  constexpr int kLayers = 8;
  // Peak live: every activation and two gradients; the budget is half.
  make((kLayers + 2) * kBytes / 2, 0, true, /*learn=*/true);
  BudgetWatch watch;
  residency::ResidencyStats settled;
  constexpr int kSteps = 7;
  constexpr int kSettledFrom = 4;  // the schedule is found in step 1; step 2 and 3 learn its demand
  for (int step = 0; step < kSteps; ++step) {
    if (step == kSettledFrom) settled = allocator_->residency()->stats();
    ASSERT_NO_FATAL_FAILURE(learned_step(step, kLayers, kBytes));
  }
  ASSERT_EQ(api().streamSynchronize(stream_), CUDA_SUCCESS);
  EXPECT_EQ(errors_.load(), 0u) << "words that kernels found wrong";
  EXPECT_LE(watch.stop(), allocator_->space().device_limit()) << "device bytes over the budget";
  const auto stats = allocator_->residency()->stats();
  ASSERT_NE(stats.learned_period, 0u);
  EXPECT_GT(stats.evicted_bytes, settled.evicted_bytes) << "the budget still forces evictions";
  EXPECT_EQ(stats.gates, settled.gates) << "moves gated after the step was learnt";
  EXPECT_EQ(stats.fallbacks, 0u);
  EXPECT_EQ(stats.failed_moves, 0u);
  EXPECT_GT(stats.learned_prefetches, settled.learned_prefetches);
  EXPECT_GT(stats.precopies_used, settled.precopies_used);
}

// A launch the scan cannot read, once the step is learnt (the runtime calls
// Allocator::unread_launch for it): the precopies made so far are dropped,
// never committed, and every later move is gated again; nothing is lost.
TEST_F(Residency, AnUnreadLaunchEndsLearnedMovesAndDropsThePrecopies) {
  constexpr std::size_t kBytes = 2 * kPage;
  constexpr int kLayers = 8;
  make((kLayers + 2) * kBytes / 2, 0, true, /*learn=*/true);
  BudgetWatch watch;
  constexpr int kSteps = 8;
  constexpr int kUnreadAt = 5;  // learnt by then (see the test above)
  residency::ResidencyStats at_unread;
  for (int step = 0; step < kSteps; ++step) {
    // Mid-forward, where precopies are outstanding.
    if (step == kUnreadAt) at_unread = allocator_->residency()->stats();
    ASSERT_NO_FATAL_FAILURE(learned_step(step, kLayers, kBytes, false, step == kUnreadAt ? kLayers - 3 : -1));
  }
  ASSERT_EQ(api().streamSynchronize(stream_), CUDA_SUCCESS);
  EXPECT_EQ(errors_.load(), 0u) << "words that kernels found wrong";
  EXPECT_LE(watch.stop(), allocator_->space().device_limit()) << "device bytes over the budget";
  const auto stats = allocator_->residency()->stats();
  ASSERT_GT(at_unread.tracked_moves, 0u) << "learned moves had begun";
  // The step's first launches still moved blocks without a gate.
  const auto after = unread_stats_;
  EXPECT_EQ(stats.tracked_moves, after.tracked_moves) << "a move without a gate after the unread launch";
  EXPECT_EQ(stats.precopies_used, after.precopies_used) << "a precopy committed after the unread launch";
  EXPECT_EQ(stats.precopies, after.precopies);
  EXPECT_GT(stats.gates, at_unread.gates) << "the budget still forces moves, gated now";
  EXPECT_GT(stats.evicted_bytes, at_unread.evicted_bytes);
}

// prefetch:learn with copies slow enough that a block copied out ahead of a
// predicted eviction is still being read when its next launch comes, or
// when it is freed and its pages go to a new block that a kernel fills. The
// last step breaks the schedule: each activation is rewritten by its
// backward launch. No kernel may write pages a precopy is still reading:
// the stale copy is discarded either way, so only the TSan preset (which
// runs this test) sees the race; the other presets check that nothing is
// lost and that precopies were made stale.
TEST_F(Residency, NoKernelWritesPagesAPrecopyIsStillReading) {
  constexpr std::size_t kBytes = 2 * kPage;
  constexpr int kLayers = 8;
  make((kLayers + 2) * kBytes / 2, 0, true, /*learn=*/true);
  set_copy_gbps(0.2);
  BudgetWatch watch;
  constexpr int kSteps = 5;
  for (int step = 0; step < kSteps; ++step) {
    ASSERT_NO_FATAL_FAILURE(learned_step(step, kLayers, kBytes, /*rewrite=*/step == kSteps - 1));
  }
  ASSERT_EQ(api().streamSynchronize(stream_), CUDA_SUCCESS);
  EXPECT_EQ(errors_.load(), 0u) << "words that kernels found wrong";
  EXPECT_LE(watch.stop(), allocator_->space().device_limit()) << "device bytes over the budget";
  const auto stats = allocator_->residency()->stats();
  EXPECT_NE(stats.learned_period, 0u);
  EXPECT_GT(stats.precopies, stats.precopies_used) << "no precopy was made stale by a use or a free";
  EXPECT_EQ(stats.failed_moves, 0u);
}

// prefetch:learn with blocks as large as the room a backward launch leaves:
// each launch names its activation, the gradient above and the gradient it
// writes, and the budget holds those three and half a block more. An
// activation comes back ahead only in part (what fits beside the running
// launch); its launch brings back the rest, and waits for every part.
TEST_F(Residency, LearnedStepsBringBackBlocksLargerThanTheRoomInPartsAndLoseNothing) {
  constexpr std::size_t kBytes = 4 * kPage;
  constexpr int kLayers = 6;
  make(3 * kBytes + kBytes / 2, 0, true, /*learn=*/true);
  BudgetWatch watch;
  for (int step = 0; step < 6; ++step) {
    const auto seed = [&](int layer, int kind) { return static_cast<std::uint32_t>(1000 * step + 10 * layer + kind); };
    auto* errors = &errors_;
    const auto words = [](std::uintptr_t p) { return reinterpret_cast<std::uint32_t*>(p); };
    std::vector<std::uintptr_t> activation;
    for (int i = 0; i < kLayers; ++i) {
      auto got = allocator_->allocate(kBytes, 0, false);
      ASSERT_TRUE(got.ok()) << "step " << step << " layer " << i << ": " << got.status().message();
      const std::uintptr_t in = i > 0 ? activation.back() : 0;
      activation.push_back(got.value());
      ASSERT_EQ(scanned_layer({words(in), nullptr, words(got.value()), kBytes / 4, i > 0 ? seed(i - 1, 0) : 0u, 0,
                               seed(i, 0), errors}),
                CUDA_SUCCESS);
    }
    std::uintptr_t upper = 0;
    for (int i = kLayers - 1; i >= 0; --i) {
      auto gradient = allocator_->allocate(kBytes, 0, false);
      ASSERT_TRUE(gradient.ok()) << "step " << step << " backward " << i << ": " << gradient.status().message();
      const std::uintptr_t a = activation[static_cast<std::size_t>(i)];
      ASSERT_EQ(scanned_layer({words(a), words(upper), words(gradient.value()), kBytes / 4, seed(i, 0),
                               upper != 0 ? seed(i + 1, 1) : 0u, seed(i, 1), errors}),
                CUDA_SUCCESS);
      ASSERT_TRUE(allocator_->deallocate(a, 0, false).ok());
      if (upper != 0) {
        ASSERT_TRUE(allocator_->deallocate(upper, 0, false).ok());
      }
      upper = gradient.value();
    }
    ASSERT_EQ(api().streamSynchronize(stream_), CUDA_SUCCESS);
    EXPECT_EQ(host_mismatches(upper, kBytes, seed(0, 1)), 0u) << "step " << step;
    ASSERT_TRUE(allocator_->deallocate(upper, 0, false).ok());
  }
  EXPECT_EQ(errors_.load(), 0u) << "words that kernels found wrong";
  EXPECT_LE(watch.stop(), allocator_->space().device_limit()) << "device bytes over the budget";
  const auto stats = allocator_->residency()->stats();
  ASSERT_NE(stats.learned_period, 0u);
  EXPECT_GT(stats.learned_prefetches, 0u) << "nothing came back ahead: a block never fits whole";
  EXPECT_GT(stats.precopies_used, 0u);
  EXPECT_EQ(stats.failed_moves, 0u);
}

// prefetch:launch: a launch whose blocks do not all fit in the budget reads
// what does not fit on the host. Making room for one of its blocks never
// evicts another of them, which the same launch would then need back.
TEST_F(Residency, ALaunchWhoseBlocksDoNotAllFitMovesNoneOfItsOwnBlocksOut) {
  constexpr std::size_t kBytes = 3 * kPage;
  make(8 * kPage);
  auto* errors = &errors_;
  std::uintptr_t block[3] = {};
  for (std::uint32_t i = 0; i < 3; ++i) {
    auto got = allocator_->allocate(kBytes, 0, false);  // the third evicts the first's oldest pages
    ASSERT_TRUE(got.ok()) << got.status().message();
    block[i] = got.value();
    ASSERT_EQ(fill(block[i], kBytes, 10 + i), CUDA_SUCCESS);
  }
  ASSERT_EQ(api().streamSynchronize(stream_), CUDA_SUCCESS);
  const auto before = allocator_->residency()->stats();
  ASSERT_GT(before.host_resident_bytes, 0u);
  const auto words = [](std::uintptr_t p) { return reinterpret_cast<std::uint32_t*>(p); };
  for (int launch = 0; launch < 4; ++launch) {
    // Reads the first two, rewrites the third with its own pattern.
    ASSERT_EQ(scanned_layer({words(block[0]), words(block[1]), words(block[2]), kBytes / 4, 10, 11, 12, errors}),
              CUDA_SUCCESS);
  }
  ASSERT_EQ(api().streamSynchronize(stream_), CUDA_SUCCESS);
  EXPECT_EQ(errors_.load(), 0u);
  for (std::uint32_t i = 0; i < 3; ++i) EXPECT_EQ(host_mismatches(block[i], kBytes, 10 + i), 0u) << i;
  const auto after = allocator_->residency()->stats();
  EXPECT_EQ(after.evicted_bytes, before.evicted_bytes) << "the launch moved its own blocks out";
  EXPECT_EQ(after.host_resident_launches, before.host_resident_launches + 4);
  EXPECT_EQ(after.failed_moves, 0u);
  for (std::uintptr_t p : block) ASSERT_TRUE(allocator_->deallocate(p, 0, false).ok());
}

// The same with more blocks than the scan lists: those beyond the list come
// back at once, and neither they nor the listed ones are evicted for each
// other.
TEST_F(Residency, ALaunchOfMoreBlocksThanTheScanListsMovesNoneOfThemOut) {
  make(10 * kPage);
  ManyBlocks args{};
  for (std::size_t b = 0; b < kManyBlocks; ++b) {
    auto got = allocator_->allocate(kPage, 0, false);  // the eleventh on evict the oldest
    ASSERT_TRUE(got.ok()) << got.status().message();
    args.block[b] = reinterpret_cast<std::uint32_t*>(got.value());
    ASSERT_EQ(fill(got.value(), kPage, static_cast<std::uint32_t>(b)), CUDA_SUCCESS);
  }
  args.count = kPage / 4;
  args.errors = &errors_;
  ASSERT_EQ(api().streamSynchronize(stream_), CUDA_SUCCESS);
  const auto before = allocator_->residency()->stats();
  ASSERT_GT(before.host_resident_bytes, 0u);
  for (int launch = 0; launch < 3; ++launch) {
    void* params[] = {&args};
    ASSERT_EQ(launch_scanned(many_blocks_function(), params), CUDA_SUCCESS);
  }
  ASSERT_EQ(api().streamSynchronize(stream_), CUDA_SUCCESS);
  EXPECT_EQ(errors_.load(), 0u);
  const auto after = allocator_->residency()->stats();
  EXPECT_EQ(after.evicted_bytes, before.evicted_bytes) << "the launch moved its own blocks out";
  EXPECT_EQ(after.host_resident_launches, before.host_resident_launches + 3);
  EXPECT_EQ(after.failed_moves, 0u);
  for (std::uint32_t* p : args.block)
    ASSERT_TRUE(allocator_->deallocate(reinterpret_cast<std::uintptr_t>(p), 0, false).ok());
}

// A launch word inside a block (a view, a field of a struct) names the
// block while it lives, and nothing once it is freed, however often the
// same word was seen before.
TEST_F(Residency, AnInteriorLaunchWordNamesItsBlockOnlyWhileItLives) {
  make(64 * MiB);
  auto a = allocator_->allocate(6 * MiB, 0, false);
  ASSERT_TRUE(a.ok());
  const std::uintptr_t inside = a.value() + 4 * MiB + 8;
  for (int launch = 0; launch < 3; ++launch) {
    runtime::LaunchUse use;
    pool::Pins pins;
    EXPECT_TRUE(allocator_->use_in_launch(inside, stream_, &use, &pins, pool::Pool::OnHost::bring_back_later));
    ASSERT_EQ(use.count, 1u);
    EXPECT_EQ(use.blocks[0].address, a.value());
    ASSERT_EQ(pins.count, 1u);
    allocator_->release_pins(pins);
  }
  ASSERT_TRUE(allocator_->deallocate(a.value(), 0, false).ok());
  runtime::LaunchUse after;
  pool::Pins pins;
  EXPECT_FALSE(allocator_->use_in_launch(inside, stream_, &after, &pins, pool::Pool::OnHost::bring_back_later))
      << "a freed block was named by a launch";
  EXPECT_EQ(after.count, 0u);
  EXPECT_EQ(pins.count, 0u);
}

TEST_F(Residency, AnEvictedBlockKeepsItsAddressAndComesBackWhenHinted) {
  make(8 * MiB);
  auto a = allocator_->allocate(6 * MiB, 0, false);
  ASSERT_TRUE(a.ok());
  std::memset(reinterpret_cast<void*>(a.value()), 0x11, 6 * MiB);
  auto b = allocator_->allocate(6 * MiB, 0, false);  // needs a's pages
  ASSERT_TRUE(b.ok()) << b.status().message();
  std::memset(reinterpret_cast<void*>(b.value()), 0x22, 6 * MiB);
  const auto before = allocator_->pool().stats();
  EXPECT_GT(before.host_pages, 0u);
  const auto* bytes = reinterpret_cast<const unsigned char*>(a.value());
  for (std::size_t i = 0; i < 6 * MiB; i += 4096) ASSERT_EQ(bytes[i], 0x11) << i;
  ASSERT_TRUE(allocator_->pool().advise(a.value(), 6 * MiB, pool::Pool::Advice::will_need).ok());
  EXPECT_GT(allocator_->residency()->stats().prefetches, 0u);
  (void)api().ctxSynchronize();
  for (std::size_t i = 0; i < 6 * MiB; ++i) ASSERT_EQ(bytes[i], 0x11) << i;
  const auto* other = reinterpret_cast<const unsigned char*>(b.value());
  for (std::size_t i = 0; i < 6 * MiB; ++i) ASSERT_EQ(other[i], 0x22) << i;
  EXPECT_LE(allocator_->pool().stats().reserved_bytes, 8 * MiB);
}

// A move remaps page by page but grants access once per run of adjacent
// pages: cuMemSetAccess costs 30 us a call on an H200, most of a page's
// remap, and the device waits at the gate while the host remaps.
TEST_F(Residency, AMoveGrantsAccessOncePerRunOfPagesNotPerPage) {
  make(18 * MiB);
  auto a = allocator_->allocate(16 * MiB, 0, false);
  ASSERT_TRUE(a.ok());
  std::memset(reinterpret_cast<void*>(a.value()), 0x31, 16 * MiB);
  const auto before = allocator_->pool().stats();
  const auto moved_before = allocator_->residency()->stats();
  auto b = allocator_->allocate(16 * MiB, 0, false);  // a's eight pages go to the host
  ASSERT_TRUE(b.ok()) << b.status().message();
  std::memset(reinterpret_cast<void*>(b.value()), 0x32, 16 * MiB);
  ASSERT_TRUE(allocator_->pool().advise(a.value(), 16 * MiB, pool::Pool::Advice::will_need).ok());  // and back
  ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
  const auto after = allocator_->pool().stats();
  const auto moved = allocator_->residency()->stats();
  const std::uint64_t pages_moved =
      (moved.evicted_bytes - moved_before.evicted_bytes + moved.prefetched_bytes - moved_before.prefetched_bytes) /
      (2 * MiB);
  ASSERT_GE(pages_moved, 16U) << "a out and back, at least";
  EXPECT_LE(after.access_grants - before.access_grants, 6U)
      << pages_moved << " pages moved; a grant per page would make " << pages_moved + 8;
  const auto* bytes = reinterpret_cast<const unsigned char*>(a.value());
  for (std::size_t i = 0; i < 16 * MiB; i += 4096) ASSERT_EQ(bytes[i], 0x31) << i;
  const auto* other = reinterpret_cast<const unsigned char*>(b.value());
  for (std::size_t i = 0; i < 16 * MiB; i += 4096) ASSERT_EQ(other[i], 0x32) << i;
}

// A gate waits for a flag only the host opens. The host must queue nothing
// on the legacy stream behind that wait: another thread keeping the legacy
// stream's queue full (as a GPU's holds about a thousand launches) would
// leave the host waiting for room behind its own shut gate. The gate now
// waits on a stream of its own; the legacy stream's last item of the gate
// is a wait for the gate's end.
TEST_F(Residency, AGateNeverQueuesBehindItsFlagOnTheLegacyStreamAnotherThreadFills) {
  auto set_depth = testing::sim_control<void (*)(std::size_t)>("tidepool_sim_set_queue_depth");
  auto depth_now = testing::sim_control<std::size_t (*)()>("tidepool_sim_queue_depth");
  ASSERT_NE(set_depth, nullptr);
  ASSERT_NE(depth_now, nullptr);
  struct RestoreDepth {
    void (*set)(std::size_t);
    std::size_t depth;
    ~RestoreDepth() { set(depth); }
  } restore{set_depth, depth_now()};
  make(8 * MiB);
  auto a = allocator_->allocate(6 * MiB, 0, false);
  ASSERT_TRUE(a.ok());
  std::memset(reinterpret_cast<void*>(a.value()), 0x51, 6 * MiB);
  CUdeviceptr other = 0;  // the flooding thread's own memory, no pool block
  ASSERT_EQ(api().memAlloc(&other, 4096), CUDA_SUCCESS);
  set_depth(8);
  std::atomic<bool> done{false};
  std::atomic<bool> stop{false};
  std::jthread flood([&] {
    driver::ScopedContext scope(api(), allocator_->context());
    while (!stop) (void)api().memsetD8Async(other, 1, 4096, nullptr);
  });
  // A deadlock fails the test at once rather than hanging it.
  std::jthread watchdog([&] {
    for (int i = 0; i < 2000 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!done) {
      std::fprintf(stderr, "a gate blocked the host behind its own flag: deadlock\n");
      std::_Exit(3);
    }
  });
  for (int round = 0; round < 20; ++round) {
    auto b = allocator_->allocate(6 * MiB, 0, false);  // a goes out through a gate
    EXPECT_TRUE(b.ok()) << b.status().message();
    // a comes back, b going out to make room.
    const auto back = allocator_->pool().advise(a.value(), 6 * MiB, pool::Pool::Advice::will_need);
    EXPECT_TRUE(back.ok()) << back.message();
    if (b.ok()) {
      EXPECT_TRUE(allocator_->deallocate(b.value(), 0, false).ok());
    }
  }
  done = true;
  stop = true;
  flood.join();
  ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
  EXPECT_GT(allocator_->residency()->stats().gates, 20U) << "the moves went through gates";
  const auto* bytes = reinterpret_cast<const unsigned char*>(a.value());
  for (std::size_t i = 0; i < 6 * MiB; i += 4096) ASSERT_EQ(bytes[i], 0x51) << i;
  (void)api().memFree(other);
}

TEST_F(Residency, KeepResidentBlocksAreNeverEvicted) {
  make(8 * MiB);
  auto keep = allocator_->allocate(4 * MiB, 0, false);
  ASSERT_TRUE(keep.ok());
  ASSERT_TRUE(allocator_->pool().advise(keep.value(), 1, pool::Pool::Advice::keep_resident).ok());
  auto other = allocator_->allocate(4 * MiB, 0, false);
  ASSERT_TRUE(other.ok());
  auto more = allocator_->allocate(4 * MiB, 0, false);  // must evict `other`, not `keep`
  ASSERT_TRUE(more.ok()) << more.status().message();
  space::Reservation* r = nullptr;
  for (const auto& reservation : allocator_->space().reservations()) {
    if (reservation->contains(keep.value())) r = reservation.get();
  }
  ASSERT_NE(r, nullptr);
  const auto [first, end] = r->whole_pages(keep.value(), 4 * MiB);
  for (std::size_t p = first; p < end; ++p) EXPECT_EQ(r->page(p).residency, space::Residency::device);
  // With every block kept resident there is nothing to evict: the next
  // request is refused cleanly.
  ASSERT_TRUE(allocator_->pool().advise(more.value(), 1, pool::Pool::Advice::keep_resident).ok());
  auto refused = allocator_->allocate(4 * MiB, 0, false);
  EXPECT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().error(), util::Error::out_of_memory);
}

TEST_F(Residency, WontNeedBlocksGoFirst) {
  make(8 * MiB);
  auto a = allocator_->allocate(4 * MiB, 0, false);
  auto b = allocator_->allocate(4 * MiB, 0, false);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(allocator_->pool().advise(b.value(), 1, pool::Pool::Advice::wont_need).ok());
  auto c = allocator_->allocate(4 * MiB, 0, false);
  ASSERT_TRUE(c.ok());
  const auto residency_of = [&](std::uintptr_t block) {
    for (const auto& reservation : allocator_->space().reservations()) {
      if (reservation->contains(block)) return reservation->page(reservation->page_of(block)).residency;
    }
    return space::Residency::unmapped;
  };
  EXPECT_EQ(residency_of(b.value()), space::Residency::host);
  EXPECT_EQ(residency_of(a.value()), space::Residency::device);
}

TEST_F(Residency, AFullHostCacheIsACleanOutOfMemoryAndLosesNothing) {
  make(8 * MiB, /*host_cache=*/4 * MiB);
  std::vector<std::uintptr_t> live;
  util::Status refused;
  for (int i = 0; i < 8; ++i) {
    auto got = allocator_->allocate(4 * MiB, 0, false);
    if (!got.ok()) {
      refused = got.status();
      break;
    }
    std::memset(reinterpret_cast<void*>(got.value()), 0x30 + i, 4 * MiB);
    live.push_back(got.value());
  }
  // 8 MiB on the device and 4 MiB on the host: the fourth block is refused.
  EXPECT_EQ(live.size(), 3u);
  EXPECT_EQ(refused.error(), util::Error::out_of_memory);
  for (std::size_t i = 0; i < live.size(); ++i) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(live[i]);
    for (std::size_t k = 0; k < 4 * MiB; k += 512) ASSERT_EQ(bytes[k], 0x30 + i) << "block " << i;
  }
  EXPECT_GT(allocator_->residency()->stats().host_cache_full, 0u);
  // Usable afterwards: a free makes room.
  ASSERT_TRUE(allocator_->deallocate(live.back(), 0, false).ok());
  live.pop_back();
  auto again = allocator_->allocate(4 * MiB, 0, false);
  EXPECT_TRUE(again.ok()) << again.status().message();
}

// An allocation short of room only because other threads' submissions pin
// the live blocks (a synchronous copy holds its pin until the device has
// done it) waits for a pin to go and then evicts, rather than fail as it
// would not natively.
TEST_F(Residency, AnAllocationShortOfRoomOnlyForPinnedBlocksWaitsForAPinToGo) {
  pin_wait_ms_ = 30000;  // far more than the test takes: the pins go once the wait has begun
  make(16 * MiB);
  constexpr std::size_t kBytes = 8 * MiB;  // the budget holds two
  const std::vector<std::uintptr_t> blocks = fill_blocks(2, kBytes);
  ASSERT_EQ(blocks.size(), 2u);
  pool::Pins pins;  // two submissions on their way to the driver, as the hooks pin them
  for (const std::uintptr_t block : blocks) {
    (void)allocator_->use_in_copy(block, stream_, &pins, pool::Pool::OnHost::read_there);
  }
  ASSERT_EQ(pins.count, 2u);
  std::atomic<bool> answered{false};
  std::thread submitted([&] {
    while (allocator_->pool().stats().pin_waits == 0 && !answered.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    allocator_->release_pins(pins);
  });
  const auto began = std::chrono::steady_clock::now();
  auto got = allocator_->allocate(kBytes, 0, false);
  const auto waited = std::chrono::steady_clock::now() - began;
  answered = true;
  submitted.join();
  ASSERT_TRUE(got.ok()) << "the allocation failed rather than wait for the pins: " << got.status().message();
  // Not a timing check: half the bound means the release woke the wait,
  // rather than the bound ending it.
  EXPECT_LT(waited, std::chrono::milliseconds(pin_wait_ms_ / 2)) << "the pin's release did not wake the wait";
  EXPECT_EQ(allocator_->pool().stats().pin_waits, 1u);
  EXPECT_GT(allocator_->residency()->stats().evictions, 0u);
  ASSERT_EQ(fill(got.value(), kBytes, 3), CUDA_SUCCESS);
  expect_blocks_intact(blocks, kBytes);
  EXPECT_EQ(check(got.value(), kBytes, 3), CUDA_SUCCESS);
  ASSERT_EQ(api().streamSynchronize(stream_), CUDA_SUCCESS);
  EXPECT_EQ(errors_.load(), 0u) << "words that kernels found wrong";
}

// Pins that never go leave it failing once pin_wait_ms has passed, with
// nothing lost; a request short of room for another reason (no live block
// pinned) fails at once, with no wait.
TEST_F(Residency, AnAllocationWhosePinsNeverGoFailsOnceTheWaitIsOver) {
  pin_wait_ms_ = 50;
  make(16 * MiB);
  constexpr std::size_t kBytes = 8 * MiB;
  const std::vector<std::uintptr_t> blocks = fill_blocks(2, kBytes);
  ASSERT_EQ(blocks.size(), 2u);
  ASSERT_EQ(api().streamSynchronize(stream_), CUDA_SUCCESS);
  {
    ASSERT_TRUE(allocator_->pool().advise(blocks[0], kBytes, pool::Pool::Advice::keep_resident).ok());
    ASSERT_TRUE(allocator_->pool().advise(blocks[1], kBytes, pool::Pool::Advice::keep_resident).ok());
    auto refused = allocator_->allocate(kBytes, 0, false);
    EXPECT_EQ(refused.status().error(), util::Error::out_of_memory);
    EXPECT_EQ(allocator_->pool().stats().pin_waits, 0u) << "waited with no block pinned";
    ASSERT_TRUE(allocator_->pool().advise(blocks[0], kBytes, pool::Pool::Advice::wont_need).ok());
    ASSERT_TRUE(allocator_->pool().advise(blocks[1], kBytes, pool::Pool::Advice::wont_need).ok());
  }
  pool::Pins held;
  for (const std::uintptr_t block : blocks) {
    (void)allocator_->use_in_copy(block, stream_, &held, pool::Pool::OnHost::read_there);
  }
  const std::uint64_t ooms = allocator_->pool().stats().ooms;
  auto refused = allocator_->allocate(kBytes, 0, false);
  EXPECT_EQ(refused.status().error(), util::Error::out_of_memory);
  EXPECT_EQ(allocator_->pool().stats().pin_waits, 1u);
  EXPECT_EQ(allocator_->pool().stats().ooms, ooms + 1);
  allocator_->release_pins(held);
  expect_blocks_intact(blocks, kBytes);
  ASSERT_EQ(api().streamSynchronize(stream_), CUDA_SUCCESS);
  EXPECT_EQ(errors_.load(), 0u) << "words that kernels found wrong";
}

// A page two blocks share moves for both. Where one of them holds its pages
// where they are (a submission on its way to the driver pinned it, or
// another device's streams use it, which no gate of this pool orders), a
// bring-back for the other leaves the shared page on the host: here the
// handout of a block beside it, with room made by evicting a third. A
// submission's own pins hold nothing back from its own bring-backs.
TEST_F(Residency, APageSharedWithABlockHeldInPlaceStaysWhenItsNeighbourComesBack) {
  for (const bool peer : {false, true}) {
    SCOPED_TRACE(peer ? "used by another device" : "pinned by a submission");
    make(4 * kPage);
    // Two pages of data evicted, then freed: their host pages stay under the free range.
    auto old = allocator_->allocate(2 * kPage, 0, false);
    auto kept = allocator_->allocate(2 * kPage, 0, false);
    ASSERT_TRUE(old.ok() && kept.ok());
    ASSERT_TRUE(allocator_->pool().advise(old.value(), 2 * kPage, pool::Pool::Advice::wont_need).ok());
    auto other = allocator_->allocate(2 * kPage, 0, false);
    ASSERT_TRUE(other.ok()) << other.status().message();
    ASSERT_EQ(allocator_->pool().stats().host_pages, 2u);
    ASSERT_TRUE(allocator_->deallocate(old.value(), 0, false).ok());
    // No room to bring any back: the block handed out over them reads and
    // writes them where they are.
    ASSERT_TRUE(allocator_->pool().advise(kept.value(), 2 * kPage, pool::Pool::Advice::keep_resident).ok());
    ASSERT_TRUE(allocator_->pool().advise(other.value(), 2 * kPage, pool::Pool::Advice::keep_resident).ok());
    constexpr std::size_t kHeldBytes = kPage + 64 * 1024;
    auto held = allocator_->allocate(kHeldBytes, 0, false);
    ASSERT_TRUE(held.ok()) << held.status().message();
    ASSERT_EQ(held.value(), old.value()) << "the test expects the freed range taken from its start";
    ASSERT_EQ(fill(held.value(), kHeldBytes, 11), CUDA_SUCCESS);
    pool::Pins pins;
    ASSERT_TRUE(allocator_->use_in_copy(
        held.value(), stream_, &pins, peer ? pool::Pool::OnHost::bring_back_for_peer : pool::Pool::OnHost::read_there));
    if (peer) allocator_->release_pins(pins);
    const auto held_host_pages = [&] {
      pool::Pins query;
      pool::LaunchedBlock used{};
      std::size_t host_pages = 0;
      std::size_t still = 0;
      EXPECT_TRUE(allocator_->pool().use_for_submission(held.value(), reinterpret_cast<std::uintptr_t>(stream_),
                                                        pool::Pool::OnHost::read_there, &query, &used, &host_pages,
                                                        &still));
      allocator_->release_pins(query);
      return host_pages;
    };
    ASSERT_EQ(held_host_pages(), 2u);
    // Room again (`other` may go), and a block in the held block's last page.
    ASSERT_TRUE(allocator_->pool().advise(other.value(), 2 * kPage, pool::Pool::Advice::wont_need).ok());
    constexpr std::size_t kBesideBytes = 256 * 1024;
    auto beside = allocator_->allocate(kBesideBytes, 0, false);
    ASSERT_TRUE(beside.ok()) << beside.status().message();
    ASSERT_LT(beside.value() - held.value(), 2 * kPage) << "the test expects the block beside the held one";
    EXPECT_EQ(held_host_pages(), 2u) << "a page the held block shares moved under it";
    ASSERT_EQ(fill(beside.value(), kBesideBytes, 12), CUDA_SUCCESS);
    if (!peer) allocator_->release_pins(pins);
    // One submission naming both: its own pin holds nothing back, so the
    // page comes back, but for a block another device uses.
    pool::Pins both;
    ASSERT_TRUE(allocator_->use_in_copy(held.value(), stream_, &both, pool::Pool::OnHost::read_there));
    ASSERT_TRUE(allocator_->use_in_copy(beside.value(), stream_, &both, pool::Pool::OnHost::bring_back_now));
    allocator_->release_pins(both);
    EXPECT_EQ(held_host_pages(), peer ? 2u : 1u);
    ASSERT_EQ(check(held.value(), kHeldBytes, 11), CUDA_SUCCESS);
    ASSERT_EQ(check(beside.value(), kBesideBytes, 12), CUDA_SUCCESS);
    ASSERT_EQ(api().streamSynchronize(stream_), CUDA_SUCCESS);
    EXPECT_EQ(errors_.load(), 0u) << "words that kernels found wrong";
    TearDown();
    allocator_ = nullptr;
  }
}

// Device memory is written and read only by device work (kernels here), as
// on a real GPU, where the host cannot touch it directly: the gate orders
// each move against every stream's work, whichever thread queued it.
TEST_F(Residency, EvictionsRunBesideFreesAndAllocationsOnOtherThreads) {
  make(16 * MiB);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      driver::ScopedContext scope(api(), allocator_->context());
      CUstream stream = nullptr;
      if (api().streamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
        failures++;
        return;
      }
      allocator_->stream_created(stream);
      // As the preload's hooks do: the block is pinned while its launch is
      // on its way to the driver, so that no other thread's move takes it
      // between a gate's join and its wait (the residency rule).
      const auto pinned = [&](std::uintptr_t block, const auto& launch) {
        pool::Pins pins;
        (void)allocator_->use_in_copy(block, stream, &pins, pool::Pool::OnHost::read_there);
        const CUresult launched = launch();
        allocator_->release_pins(pins);
        return launched;
      };
      std::mt19937 random(static_cast<unsigned>(t));
      std::vector<std::pair<std::uintptr_t, std::uint32_t>> mine;
      constexpr std::size_t kBytes = 4 * MiB;
      for (int step = 0; step < 30; ++step) {
        if (mine.size() < 3 || random() % 2 == 0) {
          auto got = allocator_->allocate(kBytes, 0, false);
          if (!got.ok()) continue;  // the budget may be short at a moment: every other block kept resident
          const auto seed = static_cast<std::uint32_t>(t * 1000 + step);
          if (pinned(got.value(), [&] { return launch_fill(stream, got.value(), kBytes, seed); }) != CUDA_SUCCESS) {
            failures++;
          }
          mine.emplace_back(got.value(), seed);
        } else {
          const std::size_t i = random() % mine.size();
          const std::uintptr_t block = mine[i].first;  // not a binding: the lambda captures it
          const std::uint32_t seed = mine[i].second;
          if (pinned(block, [&] { return launch_check(stream, block, kBytes, seed); }) != CUDA_SUCCESS) failures++;
          if (!allocator_->deallocate(block, 0, false).ok()) failures++;
          mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(i));
        }
      }
      for (const auto& entry : mine) {
        const std::uintptr_t p = entry.first;
        const std::uint32_t seed = entry.second;
        if (pinned(p, [&] { return launch_check(stream, p, kBytes, seed); }) != CUDA_SUCCESS) failures++;
        if (!allocator_->deallocate(p, 0, false).ok()) failures++;
      }
      if (api().streamSynchronize(stream) != CUDA_SUCCESS) failures++;
      allocator_->stream_destroying(stream);
      (void)api().streamDestroy(stream);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(errors_.load(), 0u) << "words that kernels found wrong";
  EXPECT_GT(allocator_->residency()->stats().evictions, 0u);
}

// Each driver call on the move paths fails once, at each of its first calls
// in turn; the data survives and the allocator keeps working.
TEST_F(Residency, AFailedDriverCallOnAMoveLosesNothing) {
  const char* calls[] = {"cuMemcpyDtoDAsync_v2", "cuMemMap",        "cuMemUnmap",         "cuMemCreate",
                         "cuMemSetAccess",       "cuEventRecord",   "cuEventSynchronize", "cuStreamWaitValue32_v2",
                         "cuStreamWaitEvent",    "cuCtxSynchronize"};
  for (const char* call : calls) {
    for (unsigned nth = 1; nth <= 3; ++nth) {
      SCOPED_TRACE(std::string(call) + " #" + std::to_string(nth));
      make(8 * MiB);
      auto a = allocator_->allocate(6 * MiB, 0, false);
      ASSERT_TRUE(a.ok());
      std::memset(reinterpret_cast<void*>(a.value()), 0x41, 6 * MiB);
      inject_fault(call, nth, CUDA_ERROR_UNKNOWN);
      auto b = allocator_->allocate(6 * MiB, 0, false);  // evicts a (or fails cleanly)
      if (b.ok()) std::memset(reinterpret_cast<void*>(b.value()), 0x42, 6 * MiB);
      (void)allocator_->pool().advise(a.value(), 6 * MiB, pool::Pool::Advice::will_need);
      clear_faults();  // the test's own synchronisation must not be the call that fails
      ASSERT_EQ(api().ctxSynchronize(), CUDA_SUCCESS);
      const auto* bytes = reinterpret_cast<const unsigned char*>(a.value());
      for (std::size_t k = 0; k < 6 * MiB; k += 512) ASSERT_EQ(bytes[k], 0x41) << k;
      if (b.ok()) {
        const auto* other = reinterpret_cast<const unsigned char*>(b.value());
        for (std::size_t k = 0; k < 6 * MiB; k += 512) ASSERT_EQ(other[k], 0x42) << k;
        ASSERT_TRUE(allocator_->deallocate(b.value(), 0, false).ok());
      }
      // Still usable: another eviction round works.
      auto c = allocator_->allocate(6 * MiB, 0, false);
      ASSERT_TRUE(c.ok()) << c.status().message();
      ASSERT_TRUE(allocator_->deallocate(c.value(), 0, false).ok());
      ASSERT_TRUE(allocator_->deallocate(a.value(), 0, false).ok());
      TearDown();
      allocator_.reset();
    }
  }
}

// The `extra` form of a launch: the parameters packed in one buffer at the
// kernel's offsets. check_kernel's layout is (words@0, count@8, seed@16,
// errors@24): 32 bytes.
struct PackedCheck {
  std::uint32_t* words;
  std::size_t count;
  std::uint32_t seed;
  std::atomic<std::uint64_t>* errors;
};
static_assert(sizeof(PackedCheck) == 32);

// Two pages, the second inaccessible: a buffer placed at the end of the
// first faults on any read past it.
class GuardedBuffer {
 public:
  GuardedBuffer() {
    page_ = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    base_ = ::mmap(nullptr, 2 * page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(base_, MAP_FAILED);
    EXPECT_EQ(::mprotect(static_cast<char*>(base_) + page_, page_, PROT_NONE), 0);
  }
  ~GuardedBuffer() { ::munmap(base_, 2 * page_); }
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;
  // `bytes` bytes that end where the inaccessible page begins.
  void* last(std::size_t bytes) { return static_cast<char*>(base_) + page_ - bytes; }

 private:
  std::size_t page_ = 0;
  void* base_ = nullptr;
};

TEST_F(Residency, APackedLaunchIsScannedAndItsEvictedBlockComesBackFirst) {
  make(8 * MiB);
  auto a = allocator_->allocate(6 * MiB, 0, false);
  ASSERT_TRUE(a.ok());
  ASSERT_EQ(fill(a.value(), 6 * MiB, 5), CUDA_SUCCESS);
  auto b = allocator_->allocate(6 * MiB, 0, false);  // evicts a
  ASSERT_TRUE(b.ok()) << b.status().message();
  ASSERT_EQ(fill(b.value(), 6 * MiB, 6), CUDA_SUCCESS);
  ASSERT_EQ(api().streamSynchronize(stream_), CUDA_SUCCESS);
  ASSERT_GT(allocator_->pool().stats().host_pages, 0u);

  PackedCheck packed{reinterpret_cast<std::uint32_t*>(a.value()), 6 * MiB / 4, 5, &errors_};
  std::size_t size = sizeof packed;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
  runtime::LaunchUse use;
  pool::Pins pins;
  scanner_.for_each_word(check_function(), nullptr, extra, [&](std::uintptr_t word) {
    (void)allocator_->use_in_launch(word, stream_, &use, &pins, pool::Pool::OnHost::bring_back_later);
  });
  ASSERT_EQ(use.count, 1u) << "the packed buffer's pointer names the block";
  EXPECT_EQ(use.blocks[0].address, a.value());
  allocator_->end_launch(check_function(), use, stream_);
  EXPECT_TRUE(use.brought_back);
  EXPECT_FALSE(use.still_on_host);
  ASSERT_EQ(api().launchKernel(check_function(), 1, 1, 1, 1, 1, 1, 0, stream_, nullptr, extra), CUDA_SUCCESS);
  allocator_->release_pins(pins);
  ASSERT_EQ(api().streamSynchronize(stream_), CUDA_SUCCESS);
  EXPECT_EQ(errors_.load(), 0u);
  EXPECT_EQ(host_mismatches(a.value(), 6 * MiB, 5), 0u);
  EXPECT_EQ(host_mismatches(b.value(), 6 * MiB, 6), 0u);
}

// A packed buffer smaller than the size it claims: the scan reads none of
// it (a read past it would fault here), and the driver refuses the launch.
TEST_F(Residency, APackedLaunchThatClaimsMoreOrLessThanItsKernelTakesIsNeitherScannedNorRun) {
  make(8 * MiB);
  auto a = allocator_->allocate(6 * MiB, 0, false);
  ASSERT_TRUE(a.ok());
  GuardedBuffer guard;
  void* buffer = guard.last(16);
  std::uintptr_t pointer = a.value();
  std::memcpy(buffer, &pointer, sizeof pointer);
  for (std::size_t claimed : {std::size_t{1} << 20, std::size_t{1} << 40, std::size_t{16}, std::size_t{33}}) {
    std::size_t size = claimed;
    void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
    std::size_t words = 0;
    scanner_.for_each_word(check_function(), nullptr, extra, [&](std::uintptr_t) { ++words; });
    EXPECT_EQ(words, 0u) << claimed << " bytes claimed";
    EXPECT_EQ(api().launchKernel(check_function(), 1, 1, 1, 1, 1, 1, 0, stream_, nullptr, extra),
              CUDA_ERROR_INVALID_VALUE)
        << claimed << " bytes claimed";
  }
  // Both forms at once, a size without a buffer, an unknown marker, and an
  // array with no end: none is scanned.
  std::size_t exact = sizeof(PackedCheck);
  void* params[] = {&pointer};
  void* both[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buffer, CU_LAUNCH_PARAM_BUFFER_SIZE, &exact, CU_LAUNCH_PARAM_END};
  void* no_buffer[] = {CU_LAUNCH_PARAM_BUFFER_SIZE, &exact, CU_LAUNCH_PARAM_END};
  void* unknown[] = {reinterpret_cast<void*>(std::uintptr_t{7}), buffer, CU_LAUNCH_PARAM_END};
  std::vector<void*> endless(64, CU_LAUNCH_PARAM_BUFFER_SIZE);
  for (std::size_t i = 1; i < endless.size(); i += 2) endless[i] = &exact;
  const std::pair<void**, void**> launches[] = {
      {params, both}, {nullptr, no_buffer}, {nullptr, unknown}, {nullptr, endless.data()}};
  for (const auto& [p, e] : launches) {
    std::size_t words = 0;
    scanner_.for_each_word(check_function(), p, e, [&](std::uintptr_t) { ++words; });
    EXPECT_EQ(words, 0u);
  }
  EXPECT_EQ(api().launchKernel(check_function(), 1, 1, 1, 1, 1, 1, 0, stream_, params, both), CUDA_ERROR_INVALID_VALUE);
  ASSERT_TRUE(allocator_->deallocate(a.value(), 0, false).ok());
}

// A budget lowered below what is live, with eviction: live blocks' pages go
// to the host at once, so the pool never holds more than the budget in
// force, and every byte survives.
TEST_F(Residency, ALoweredBudgetMovesLiveBlocksToTheHostAtOnceAndLosesNothing) {
  make(64 * MiB);
  constexpr std::size_t kBlocks = 6;
  constexpr std::size_t kBytes = 8 * MiB;
  std::vector<std::uintptr_t> live;
  for (std::size_t b = 0; b < kBlocks; ++b) {
    auto got = allocator_->allocate(kBytes, 0, false);
    ASSERT_TRUE(got.ok()) << got.status().message();
    live.push_back(got.value());
    ASSERT_EQ(fill(live.back(), kBytes, static_cast<std::uint32_t>(b)), CUDA_SUCCESS);
  }
  ASSERT_GE(allocator_->pool().stats().reserved_bytes, kBlocks * kBytes);
  const util::Status lowered = allocator_->set_device_limit(16 * MiB);
  ASSERT_TRUE(lowered.ok()) << lowered.message();
  EXPECT_EQ(allocator_->space().device_limit(), 16 * MiB);
  EXPECT_LE(allocator_->pool().stats().reserved_bytes, 16 * MiB);
  EXPECT_GT(allocator_->pool().stats().host_pages, 0u);
  EXPECT_LE(sim_device_bytes(), 16 * MiB) << "the driver still holds more than the budget";
  for (std::size_t b = 0; b < kBlocks; ++b) {
    ASSERT_EQ(check(live[b], kBytes, static_cast<std::uint32_t>(b)), CUDA_SUCCESS);
  }
  ASSERT_EQ(api().streamSynchronize(stream_), CUDA_SUCCESS);
  EXPECT_EQ(errors_.load(), 0u);
  for (std::size_t b = 0; b < kBlocks; ++b) {
    EXPECT_EQ(host_mismatches(live[b], kBytes, static_cast<std::uint32_t>(b)), 0u) << "block " << b;
  }
  // Later allocations stay within it.
  auto more = allocator_->allocate(kBytes, 0, false);
  ASSERT_TRUE(more.ok()) << more.status().message();
  EXPECT_LE(allocator_->pool().stats().reserved_bytes, 16 * MiB);
  ASSERT_TRUE(allocator_->deallocate(more.value(), 0, false).ok());
  for (std::uintptr_t p : live) ASSERT_TRUE(allocator_->deallocate(p, 0, false).ok());
}

// A budget eviction cannot reach (every page is shared by blocks smaller
// than a page, so none can move) is refused before anything moves.
TEST_F(Residency, ALoweredBudgetEvictionCannotReachIsRefusedAndMovesNothing) {
  make(64 * MiB);
  constexpr std::size_t kBytes = 768 * 1024;
  std::vector<std::uintptr_t> live;
  for (std::uint32_t b = 0; b < 40; ++b) {
    auto got = allocator_->allocate(kBytes, 0, false);
    ASSERT_TRUE(got.ok()) << got.status().message();
    live.push_back(got.value());
    ASSERT_EQ(fill(live.back(), kBytes, b), CUDA_SUCCESS);
  }
  ASSERT_EQ(api().streamSynchronize(stream_), CUDA_SUCCESS);
  const std::uint64_t held = allocator_->pool().stats().reserved_bytes;
  const util::Status refused = allocator_->set_device_limit(8 * MiB);
  EXPECT_EQ(refused.error(), util::Error::out_of_memory) << refused.message();
  EXPECT_EQ(allocator_->space().device_limit(), 64 * MiB);
  EXPECT_EQ(allocator_->pool().stats().reserved_bytes, held);
  EXPECT_EQ(allocator_->pool().stats().host_pages, 0u) << "a refused budget moved live pages";
  EXPECT_EQ(allocator_->residency()->stats().evictions, 0u);
  for (std::uint32_t b = 0; b < 40; ++b) EXPECT_EQ(host_mismatches(live[b], kBytes, b), 0u) << b;
  for (std::uintptr_t p : live) ASSERT_TRUE(allocator_->deallocate(p, 0, false).ok());
}

// --- Compressed eviction (residency/compressor.hpp) ---------------------------------------------------

class CompressedEviction : public Residency {
 protected:
  static constexpr std::size_t kBlocks = 12;
  static constexpr std::size_t kBytes = 4 * MiB;  // two pages; twelve make six times the budget

  // An allocator under an 8 MiB budget evicting with `mode`; skips where the
  // build has no kernels.
  void make_compressing(residency::CompressMode mode) {
    make(8 * MiB, 0, true, false, mode);
    if (!allocator_->residency()->compressing()) {
      GTEST_SKIP() << "no compression: " << allocator_->residency()->compression_off_reason();
    }
  }
  // Blocks written by scanned launches, each with a seed of `flags`; every
  // later allocation evicts earlier ones.
  void fill_blocks(std::uint32_t flags) {
    for (std::size_t b = 0; b < kBlocks; ++b) {
      auto got = allocator_->allocate(kBytes, 0, false);
      ASSERT_TRUE(got.ok()) << "block " << b << ": " << got.status().message();
      live_.push_back(got.value());
      seeds_.push_back(flags | static_cast<std::uint32_t>(0x100 + b));
      ASSERT_EQ(scanned_fill(live_.back(), kBytes, seeds_.back()), CUDA_SUCCESS);
    }
  }
  // Scanned launches read and rewrite blocks in random order (each brings
  // its block back first), then read every block.
  void touch_blocks(int rounds) {
    std::mt19937 random(7);
    for (int round = 0; round < rounds; ++round) {
      const std::size_t b = random() % kBlocks;
      ASSERT_EQ(scanned_check(live_[b], kBytes, seeds_[b]), CUDA_SUCCESS);
      seeds_[b] += 7919;
      ASSERT_EQ(scanned_fill(live_[b], kBytes, seeds_[b]), CUDA_SUCCESS);
    }
    for (std::size_t b = 0; b < kBlocks; ++b) ASSERT_EQ(scanned_check(live_[b], kBytes, seeds_[b]), CUDA_SUCCESS);
    ASSERT_EQ(api().streamSynchronize(stream_), CUDA_SUCCESS);
    EXPECT_EQ(errors_.load(), 0U) << "words that kernels found wrong";
  }
  void free_blocks() {
    for (std::uintptr_t p : live_) ASSERT_TRUE(allocator_->deallocate(p, 0, false).ok());
    live_.clear();
  }
  static std::uint64_t copied_to_host() {
    return testing::sim_control<decltype(&tidepool_sim_copied_bytes)>("tidepool_sim_copied_bytes")(0);
  }
  residency::CompressStats compression() const { return allocator_->residency()->stats().compression; }

  std::vector<std::uintptr_t> live_;
  std::vector<std::uint32_t> seeds_;
};

TEST_F(CompressedEviction, SparseDataCrossesTheBusInLittleOverHalfItsBytesAndLosesNone) {
  make_compressing(residency::CompressMode::zero);
  const std::uint64_t copied_before = copied_to_host();
  fill_blocks(kSparse);
  touch_blocks(30);
  const auto stats = allocator_->residency()->stats();
  const residency::CompressStats& z = stats.compression;
  EXPECT_GT(z.compressed_pages, 0U);
  EXPECT_EQ(z.raw_pages, 0U) << "half-zero pages all pay";
  EXPECT_LT(static_cast<double>(z.bytes_after), 0.6 * static_cast<double>(z.bytes_before));
  EXPECT_GT(static_cast<double>(z.bytes_after), 0.5 * static_cast<double>(z.bytes_before))
      << "half the words are not zero";
  EXPECT_LT(static_cast<double>(copied_to_host() - copied_before), 0.6 * static_cast<double>(stats.evicted_bytes))
      << "bytes over the bus to the host, against the bytes evicted";
  EXPECT_EQ(z.expand_failures, 0U);
  EXPECT_GT(z.store.peak_held_bytes, 0U);
  EXPECT_LE(z.store.peak_held_bytes, z.store.peak_used_bytes + 2 * kPage) << "streams pack end to end";
  free_blocks();
  ASSERT_EQ(api().streamSynchronize(stream_), CUDA_SUCCESS);
  (void)allocator_->pool().trim();  // free blocks' host pages go back, as their device pages do
  allocator_->residency()->collect_released_host_pages();
  EXPECT_EQ(compression().compressed_now, 0U) << "trimmed free pages' streams go back";
  EXPECT_EQ(compression().store.held_bytes, 0U) << "an empty store keeps no page: its slack is a share of its use";
}

TEST_F(CompressedEviction, DenseDataGoesRawWhenItsSampleSaysCompressionWouldNotPay) {
  make_compressing(residency::CompressMode::zero);
  fill_blocks(0);
  touch_blocks(20);
  const residency::CompressStats z = compression();
  EXPECT_EQ(z.compressed_pages, 0U);
  EXPECT_GT(z.raw_pages, 0U);
  EXPECT_EQ(z.unsampled_pages, 0U) << "compress:zero samples every page";
  free_blocks();
}

TEST_F(CompressedEviction, AutoSamplesLessWhilePagesKeepComingOutIncompressible) {
  make_compressing(residency::CompressMode::automatic);
  fill_blocks(0);
  touch_blocks(30);
  const residency::CompressStats z = compression();
  EXPECT_EQ(z.compressed_pages, 0U);
  EXPECT_GT(z.raw_pages, 0U);
  EXPECT_GT(z.unsampled_pages, 0U);
  free_blocks();
}

// The unseen access: a launch whose parameters tidepool cannot read may
// reach any block, so before it is queued every compressed page is
// unpacked where it lies, and compression ends for the run.
TEST_F(CompressedEviction, ALaunchTidepoolCannotReadFindsEveryCompressedBlocksBytes) {
  make_compressing(residency::CompressMode::zero);
  fill_blocks(kSparse);
  ASSERT_EQ(api().streamSynchronize(stream_), CUDA_SUCCESS);
  ASSERT_GT(compression().compressed_now, 0U);
  allocator_->unread_launch();  // what the preload does before it queues such a launch
  for (std::size_t b = 0; b < kBlocks; ++b) {
    ASSERT_EQ(launch_check(stream_, live_[b], kBytes, seeds_[b]), CUDA_SUCCESS);  // not scanned
  }
  ASSERT_EQ(api().streamSynchronize(stream_), CUDA_SUCCESS);
  EXPECT_EQ(errors_.load(), 0U) << "words an unscanned kernel read wrong";
  const auto stats = allocator_->residency()->stats();
  EXPECT_FALSE(stats.compressing);
  EXPECT_EQ(stats.compression.compressed_now, 0U);
  EXPECT_GT(stats.compression.expanded_pages, 0U);
  const std::uint64_t compressed = stats.compression.compressed_pages;
  touch_blocks(20);
  EXPECT_EQ(compression().compressed_pages, compressed) << "evictions after it went raw";
  free_blocks();
}

// A compressed page's pool address maps nothing: the pinned memory in use
// is the store's and the raw evicted pages', and no page stands in for the
// compressed ones.
TEST_F(CompressedEviction, ACompressedPageMapsNothingAndPinsOnlyItsShareOfTheStore) {
  make_compressing(residency::CompressMode::zero);
  fill_blocks(kSparse);
  ASSERT_EQ(api().streamSynchronize(stream_), CUDA_SUCCESS);
  std::size_t unmapped = 0;
  std::size_t on_host = 0;
  for (std::uintptr_t block : live_) {
    for (std::size_t at = 0; at < kBytes; at += kPage) {
      unsigned type = 0;
      const CUresult r = api().pointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, block + at);
      if (r == CUDA_ERROR_INVALID_VALUE) {
        ++unmapped;
        continue;
      }
      ASSERT_EQ(r, CUDA_SUCCESS);
      on_host += type == CU_MEMORYTYPE_HOST ? 1 : 0;
    }
  }
  const auto stats = allocator_->residency()->stats();
  ASSERT_GT(stats.compression.compressed_now, 0U);
  EXPECT_EQ(unmapped, stats.compression.compressed_now) << "pool pages with nothing mapped";
  EXPECT_EQ(stats.host_resident_bytes, stats.compression.store.held_bytes + on_host * kPage)
      << "host pages in use: the store's and the raw evicted pages', nothing else";
  touch_blocks(10);
  free_blocks();
}

// A peer granted access while pages are compressed (their addresses map
// nothing, so the grant passes over them) reaches them once they are back.
// Run with TIDEPOOL_SIM_DEVICES=2 (ctest residency_test_two_devices).
TEST_F(CompressedEviction, APeerGrantedWhilePagesAreCompressedReachesThemWhenTheyComeBack) {
  make_compressing(residency::CompressMode::zero);
  int devices = 0;
  ASSERT_EQ(api().deviceGetCount(&devices), CUDA_SUCCESS);
  if (devices < 2) GTEST_SKIP() << "needs TIDEPOOL_SIM_DEVICES >= 2";
  fill_blocks(kSparse);
  ASSERT_EQ(api().streamSynchronize(stream_), CUDA_SUCCESS);
  ASSERT_GT(compression().compressed_now, 0U);
  const util::Status granted = allocator_->set_peer_access(1, true);
  ASSERT_TRUE(granted.ok()) << granted.message();
  touch_blocks(10);  // every block back on the device, its bytes intact
  const auto access_faults = testing::sim_control<decltype(&tidepool_sim_access_faults)>("tidepool_sim_access_faults");
  const std::uint64_t before = access_faults();
  CUcontext here = nullptr;
  CUcontext one = nullptr;
  ASSERT_EQ(api().ctxGetCurrent(&here), CUDA_SUCCESS);
  ASSERT_EQ(api().devicePrimaryCtxRetain(&one, 1), CUDA_SUCCESS);
  ASSERT_EQ(api().ctxSetCurrent(one), CUDA_SUCCESS);
  // The block touch_blocks read last is on the device; a launch on device
  // 1 writes its first and last words.
  testing::Gate open;  // outlives the launches: each reads it when it runs
  open.release();
  for (std::size_t at : {std::size_t{0}, kBytes - sizeof(int)}) {
    auto* word = reinterpret_cast<int*>(live_.back() + at);
    EXPECT_EQ(testing::launch_gated_write(nullptr, &open, word, 7), CUDA_SUCCESS);
  }
  (void)api().ctxSynchronize();
  EXPECT_EQ(access_faults(), before) << "device 1 refused a page that came back";
  ASSERT_EQ(api().ctxSetCurrent(here), CUDA_SUCCESS);
  ASSERT_EQ(api().devicePrimaryCtxRelease(1), CUDA_SUCCESS);
  free_blocks();
}

// A move back whose remap or gate fails leaves each compressed page either
// unpacked on the device or still compressed, with no unpack aimed at an
// address that maps nothing, and every byte intact.
TEST_F(CompressedEviction, AFailedMoveBackLosesNothingAndReachesNoUnmappedAddress) {
  make_compressing(residency::CompressMode::zero);
  fill_blocks(kSparse);
  ASSERT_EQ(api().streamSynchronize(stream_), CUDA_SUCCESS);
  // clear_faults() zeroes the sim's count of unmaps under running work too:
  // it is read before each clear.
  const auto remap_faults = testing::sim_control<decltype(&tidepool_sim_remap_faults)>("tidepool_sim_remap_faults");
  std::uint64_t unmaps_under_work = remap_faults();
  const std::uint64_t fallbacks_before = allocator_->residency()->stats().fallbacks;
  struct Fault {
    const char* call;
    unsigned nth;
    CUresult error;
  };
  std::vector<Fault> faults = {{"cuMemMap", 1, CUDA_ERROR_OUT_OF_MEMORY},
                               {"cuMemMap", 2, CUDA_ERROR_OUT_OF_MEMORY},
                               {"cuMemSetAccess", 1, CUDA_ERROR_OUT_OF_MEMORY},
                               {"cuStreamWaitValue32", 1, CUDA_ERROR_NOT_SUPPORTED},
                               {"cuStreamWaitValue32", 2, CUDA_ERROR_NOT_SUPPORTED},
                               {"cuEventSynchronize", 1, CUDA_ERROR_LAUNCH_FAILED},
                               {"cuStreamSynchronize", 1, CUDA_ERROR_LAUNCH_FAILED}};
  // Each step of the gate in turn, the unpacks' queueing among them.
  for (unsigned nth = 1; nth <= 6; ++nth) {
    faults.push_back({"cuEventRecord", nth, CUDA_ERROR_LAUNCH_FAILED});
    faults.push_back({"cuStreamWaitEvent", nth, CUDA_ERROR_LAUNCH_FAILED});
    faults.push_back({"cuLaunchKernel", nth, CUDA_ERROR_LAUNCH_FAILED});
  }
  for (const Fault& f : faults) {
    SCOPED_TRACE(std::string(f.call) + " failing, call " + std::to_string(f.nth));
    for (std::size_t b = 0; b < kBlocks; ++b) {
      inject_fault(f.call, f.nth, f.error);
      (void)scanned_check(live_[b], kBytes, seeds_[b]);  // may fail with the fault: checked again below
      unmaps_under_work += remap_faults();               // counted when the unmap is called
      clear_faults();
      ASSERT_EQ(api().streamSynchronize(stream_), CUDA_SUCCESS);
    }
    for (std::size_t b = 0; b < kBlocks; ++b) ASSERT_EQ(scanned_check(live_[b], kBytes, seeds_[b]), CUDA_SUCCESS);
    ASSERT_EQ(api().streamSynchronize(stream_), CUDA_SUCCESS);
    EXPECT_EQ(errors_.load(), 0U) << "words that kernels found wrong";
  }
  unmaps_under_work += remap_faults();
  EXPECT_EQ(unmaps_under_work, 0U) << "an unmap under work that touched it";
  EXPECT_GT(allocator_->residency()->stats().fallbacks, fallbacks_before)
      << "no fault reached a gate: the failure paths went untested";
  free_blocks();
  ASSERT_EQ(api().streamSynchronize(stream_), CUDA_SUCCESS);
  (void)allocator_->pool().trim();
  allocator_->residency()->collect_released_host_pages();
  EXPECT_EQ(compression().compressed_now, 0U) << "a stream no page owns";
  EXPECT_EQ(compression().store.used_bytes, 0U);
}

// A copy with no room on the device reads the block's pages where they lie:
// compressed ones are unpacked into raw host pages first.
TEST_F(CompressedEviction, ACopyOfACompressedBlockReadsItsBytesWhereTheyLie) {
  make_compressing(residency::CompressMode::zero);
  fill_blocks(kSparse);
  ASSERT_EQ(api().streamSynchronize(stream_), CUDA_SUCCESS);
  std::size_t compressed_blocks = 0;
  for (std::size_t b = 0; b < kBlocks; ++b) {
    pool::Pins pins;
    const bool before = compression().compressed_now > 0;
    ASSERT_TRUE(allocator_->use_in_copy(live_[b], stream_, &pins, pool::Pool::OnHost::read_there));
    std::vector<std::uint32_t> words(kBytes / 4);
    ASSERT_EQ(api().memcpyDtoH(words.data(), live_[b], kBytes), CUDA_SUCCESS);
    allocator_->release_pins(pins);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < words.size(); ++i) wrong += words[i] != pattern(seeds_[b], i) ? 1 : 0;
    EXPECT_EQ(wrong, 0U) << "block " << b;
    compressed_blocks += before && compression().expanded_pages > 0 ? 1 : 0;
  }
  EXPECT_GT(compressed_blocks, 0U);
  EXPECT_EQ(compression().expand_failures, 0U);
  free_blocks();
}

// A codec launch that fails (the sample, the count or the pack) moves none
// of its pages, and every byte stays where it was.
TEST_F(CompressedEviction, AFailedCodecLaunchLosesNothing) {
  make_compressing(residency::CompressMode::zero);
  for (unsigned nth : {1U, 2U, 3U}) {
    SCOPED_TRACE("failing launch " + std::to_string(nth));
    for (std::size_t b = 0; b < 4; ++b) {
      auto got = allocator_->allocate(kBytes, 0, false);
      ASSERT_TRUE(got.ok()) << got.status().message();
      live_.push_back(got.value());
      seeds_.push_back(kSparse | static_cast<std::uint32_t>(0x300 + live_.size()));
      ASSERT_EQ(scanned_fill(live_.back(), kBytes, seeds_.back()), CUDA_SUCCESS);
    }
    ASSERT_EQ(api().streamSynchronize(stream_), CUDA_SUCCESS);
    inject_fault("cuLaunchKernel", nth, CUDA_ERROR_LAUNCH_FAILED);
    auto more = allocator_->allocate(kBytes, 0, false);  // must evict
    clear_faults();
    if (more.ok()) {
      live_.push_back(more.value());
      seeds_.push_back(kSparse | 0x777U);
      ASSERT_EQ(scanned_fill(live_.back(), kBytes, seeds_.back()), CUDA_SUCCESS);
    } else {
      EXPECT_EQ(more.status().error(), util::Error::out_of_memory) << more.status().message();
    }
    for (std::size_t b = 0; b < live_.size(); ++b) {
      ASSERT_EQ(scanned_check(live_[b], kBytes, seeds_[b]), CUDA_SUCCESS);
    }
    ASSERT_EQ(api().streamSynchronize(stream_), CUDA_SUCCESS);
    EXPECT_EQ(errors_.load(), 0U);
    free_blocks();
    seeds_.clear();
  }
}

}  // namespace
}  // namespace tidepool
