// Stress: 16 threads allocate and free through tidepool.h at once, on shared
// streams, streams of their own, their per-thread stream and the legacy
// stream, with cudaFree-semantics and stream-ordered frees (some of those on
// another stream than the one that used the block), while "kernels" on the
// sim's stream workers write and check every block. A block's bytes must be
// exactly what its owner wrote until its owner frees it, no two live blocks
// may share a byte, and at the end the statistics must balance.
//
// Under the TSan build the same run also checks the ordering itself: a block
// reused before the previous owner's queued work finished is a data race
// between two stream workers, which TSan reports.
#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "sim/sim_control.h"
#include "support/block_pattern.hpp"
#include "tidepool/tidepool.h"

namespace {

// Before main, before the runtime reads its environment: the driver the
// runtime opens must be the sim this test steers.
[[maybe_unused]] const bool kSimDriver = [] {
  ::setenv("TIDEPOOL_CUDA_LIB", TIDEPOOL_SIM_LIBRARY, 1);
  return true;
}();

constexpr int kThreads = 16;
constexpr int kSharedStreams = 4;
constexpr std::size_t kMaxLivePerThread = 6;
constexpr int kOpsPerThread = 400;

// The driver entry points the test calls, looked up the way a program that
// dlopens libcuda does: through dlsym, so tidepool's hooks (stream creation
// and destruction, launches) stand in front of the sim's where it has them.
struct Cuda {
  void* handle = nullptr;
  decltype(&::cuInit) init = nullptr;
  decltype(&::cuDeviceGet) deviceGet = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) primaryCtxRetain = nullptr;
  decltype(&::cuDevicePrimaryCtxRelease) primaryCtxRelease = nullptr;
  decltype(&::cuCtxSetCurrent) ctxSetCurrent = nullptr;
  CUresult (*ctxSynchronize)() = nullptr;
  decltype(&::cuStreamCreate) streamCreate = nullptr;
  decltype(&::cuStreamDestroy) streamDestroy = nullptr;
  CUresult (*streamSynchronize)(CUstream) = nullptr;
  CUresult (*streamWaitEvent)(CUstream, CUevent, unsigned) = nullptr;
  decltype(&::cuEventCreate) eventCreate = nullptr;
  decltype(&::cuEventDestroy) eventDestroy = nullptr;
  CUresult (*eventRecord)(CUevent, CUstream) = nullptr;
  CUresult (*launchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                           void**, void**) = nullptr;
  decltype(&::tidepool_sim_register_kernel) registerKernel = nullptr;
};

template <typename Fn>
void bind(void* handle, const char* name, Fn* slot) {
  *slot = reinterpret_cast<Fn>(::dlsym(handle, name));
  if (*slot == nullptr) ADD_FAILURE() << "the sim does not export " << name;
}

const Cuda& cuda() {
  static const Cuda c = [] {
    Cuda t;
    t.handle = ::dlopen(TIDEPOOL_SIM_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (t.handle == nullptr) {
      ADD_FAILURE() << "cannot open the sim: " << ::dlerror();
      return t;
    }
    bind(t.handle, "cuInit", &t.init);
    bind(t.handle, "cuDeviceGet", &t.deviceGet);
    bind(t.handle, "cuDevicePrimaryCtxRetain", &t.primaryCtxRetain);
    bind(t.handle, "cuDevicePrimaryCtxRelease_v2", &t.primaryCtxRelease);
    bind(t.handle, "cuCtxSetCurrent", &t.ctxSetCurrent);
    bind(t.handle, "cuCtxSynchronize", &t.ctxSynchronize);
    bind(t.handle, "cuStreamCreate", &t.streamCreate);
    bind(t.handle, "cuStreamDestroy_v2", &t.streamDestroy);
    bind(t.handle, "cuStreamSynchronize", &t.streamSynchronize);
    bind(t.handle, "cuStreamWaitEvent", &t.streamWaitEvent);
    bind(t.handle, "cuEventCreate", &t.eventCreate);
    bind(t.handle, "cuEventDestroy_v2", &t.eventDestroy);
    bind(t.handle, "cuEventRecord", &t.eventRecord);
    bind(t.handle, "cuLaunchKernel", &t.launchKernel);
    bind(t.handle, "tidepool_sim_register_kernel", &t.registerKernel);
    return t;
  }();
  return c;
}

// Kernels, run on the sim's stream workers: fill(words*, count, tag) and
// check(words*, count, tag, failures*).
void fill_kernel(void** params, void* /*user*/) {
  auto* words = *static_cast<std::uint64_t**>(params[0]);
  const auto count = *static_cast<std::size_t*>(params[1]);
  const auto tag = *static_cast<std::uint64_t*>(params[2]);
  tidepool::testing::fill_pattern(words, count, tag);
}

void check_kernel(void** params, void* /*user*/) {
  const auto* words = *static_cast<const std::uint64_t**>(params[0]);
  const auto count = *static_cast<std::size_t*>(params[1]);
  const auto tag = *static_cast<std::uint64_t*>(params[2]);
  auto* failures = *static_cast<std::atomic<std::uint64_t>**>(params[3]);
  if (!tidepool::testing::holds_pattern(words, count, tag)) failures->fetch_add(1, std::memory_order_relaxed);
}

struct Kernels {
  CUfunction fill = nullptr;
  CUfunction check = nullptr;
};

Kernels register_kernels() {
  Kernels k;
  const std::size_t fill_sizes[] = {sizeof(void*), sizeof(std::size_t), sizeof(std::uint64_t)};
  const std::size_t check_sizes[] = {sizeof(void*), sizeof(std::size_t), sizeof(std::uint64_t), sizeof(void*)};
  EXPECT_EQ(cuda().registerKernel(&k.fill, &fill_kernel, nullptr, 3, fill_sizes), CUDA_SUCCESS);
  EXPECT_EQ(cuda().registerKernel(&k.check, &check_kernel, nullptr, 4, check_sizes), CUDA_SUCCESS);
  return k;
}

// Every live block's range, across threads: a new block must overlap none.
class LiveRanges {
 public:
  // False when [base, base + size) overlaps a live range.
  bool add(std::uintptr_t base, std::size_t size) {
    std::lock_guard<std::mutex> guard(lock_);
    auto next = ranges_.lower_bound(base);
    if (next != ranges_.end() && next->first < base + size) return false;
    if (next != ranges_.begin() && std::prev(next)->first + std::prev(next)->second > base) return false;
    ranges_.emplace(base, size);
    return true;
  }
  void remove(std::uintptr_t base) {
    std::lock_guard<std::mutex> guard(lock_);
    ranges_.erase(base);
  }
  std::size_t size() {
    std::lock_guard<std::mutex> guard(lock_);
    return ranges_.size();
  }

 private:
  std::mutex lock_;
  std::map<std::uintptr_t, std::size_t> ranges_;
};

struct Totals {
  std::atomic<std::uint64_t> allocations{0};
  std::atomic<std::uint64_t> frees{0};
  std::atomic<std::uint64_t> ordered_frees{0};
  std::atomic<std::uint64_t> cross_stream_frees{0};
  std::atomic<std::uint64_t> host_checks{0};
  std::atomic<std::uint64_t> failed_calls{0};     // any tidepool or driver call that did not succeed
  std::atomic<std::uint64_t> overlaps{0};         // a new block overlapping a live one
  std::atomic<std::uint64_t> kernel_failures{0};  // a check kernel found a word changed
  std::atomic<std::uint64_t> host_failures{0};    // the host found a word changed
  std::atomic<std::size_t> largest{0};
};

struct Block {
  std::uint64_t* words = nullptr;
  std::size_t bytes = 0;
  std::uint64_t tag = 0;
  CUstream stream = nullptr;
  bool ordered = false;
};

class Worker {
 public:
  Worker(int id, CUcontext context, const std::vector<CUstream>& shared, const Kernels& kernels, Totals& totals,
         LiveRanges& live)
      : id_(id), context_(context), shared_(shared), kernels_(kernels), totals_(totals), live_(live), rng_(1000 + id) {}

  void run() {
    if (!ok(cuda().ctxSetCurrent(context_))) return;
    // A stream of its own, blocking or not, created and destroyed while the
    // other threads allocate: the registry changes under them.
    if (!ok(cuda().streamCreate(&own_, id_ % 2 == 0 ? CU_STREAM_NON_BLOCKING : CU_STREAM_DEFAULT))) return;
    if (!ok(cuda().eventCreate(&event_, CU_EVENT_DISABLE_TIMING))) return;
    std::vector<Block> held;
    for (int op = 0; op < kOpsPerThread; ++op) {
      const bool release = !held.empty() && (held.size() >= kMaxLivePerThread || coin(2));
      if (release) {
        const std::size_t at = pick(held.size());
        free_block(held[at]);
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(at));
      } else {
        Block b;
        if (allocate(&b)) held.push_back(b);
      }
    }
    for (Block& b : held) free_block(b);
    // Destroyed with stream-ordered frees possibly still pending on it.
    ok(cuda().streamDestroy(own_));
    ok(cuda().eventDestroy(event_));
  }

 private:
  bool ok(CUresult r) {
    if (r == CUDA_SUCCESS) return true;
    totals_.failed_calls.fetch_add(1);
    return false;
  }
  bool ok(tidepool_status s) {
    if (s == TIDEPOOL_OK) return true;
    totals_.failed_calls.fetch_add(1);
    return false;
  }
  bool coin(unsigned one_in) { return std::uniform_int_distribution<unsigned>(0, one_in - 1)(rng_) == 0; }
  std::size_t pick(std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng_); }

  // Shared streams most of the time; the thread's own, its per-thread
  // stream, and now and then the legacy stream, which waits for every
  // blocking stream.
  CUstream pick_stream() {
    const unsigned roll = std::uniform_int_distribution<unsigned>(0, 15)(rng_);
    if (roll < 9) return shared_[roll % shared_.size()];
    if (roll < 12) return own_;
    if (roll < 15) return CU_STREAM_PER_THREAD;
    return CU_STREAM_LEGACY;
  }

  // Small blocks mostly, some of a page or more; whole words.
  std::size_t pick_size() {
    const unsigned roll = std::uniform_int_distribution<unsigned>(0, 31)(rng_);
    std::size_t bytes = 0;
    if (roll < 24) {
      bytes = std::uniform_int_distribution<std::size_t>(1, 64 << 10)(rng_);
    } else if (roll < 31) {
      bytes = std::uniform_int_distribution<std::size_t>(64 << 10, 1 << 20)(rng_);
    } else {
      bytes = std::uniform_int_distribution<std::size_t>(1 << 20, 5 << 20)(rng_);
    }
    return (bytes + 7) & ~std::size_t{7};
  }

  bool launch(CUfunction f, CUstream stream, void** params) {
    return ok(cuda().launchKernel(f, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr));
  }

  bool allocate(Block* b) {
    b->bytes = pick_size();
    b->stream = pick_stream();
    b->ordered = coin(2);
    b->tag = (static_cast<std::uint64_t>(id_ + 1) << 48) ^ (++sequence_ << 8) ^ 0x5a;
    void* p = nullptr;
    const tidepool_status s =
        b->ordered ? tidepool_malloc_async(&p, b->bytes, 0, b->stream) : tidepool_malloc(&p, b->bytes, 0);
    if (!ok(s) || p == nullptr) return false;
    b->words = static_cast<std::uint64_t*>(p);
    totals_.allocations.fetch_add(1);
    std::size_t largest = totals_.largest.load();
    while (b->bytes > largest && !totals_.largest.compare_exchange_weak(largest, b->bytes)) {
    }
    if (!live_.add(reinterpret_cast<std::uintptr_t>(p), b->bytes)) totals_.overlaps.fetch_add(1);
    // Written on the stream it was allocated for (cudaMalloc memory: on any).
    std::size_t count = b->bytes / sizeof(std::uint64_t);
    void* params[] = {&b->words, &count, &b->tag};
    return launch(kernels_.fill, b->stream, params);
  }

  void free_block(Block b) {
    std::size_t count = b.bytes / sizeof(std::uint64_t);
    auto* failures = &totals_.kernel_failures;
    void* params[] = {&b.words, &count, &b.tag, &failures};
    launch(kernels_.check, b.stream, params);
    if (coin(4)) {
      // And from the host, once the stream's work is done.
      if (ok(cuda().streamSynchronize(b.stream))) {
        if (!tidepool::testing::holds_pattern(b.words, count, b.tag)) totals_.host_failures.fetch_add(1);
        totals_.host_checks.fetch_add(1);
      }
    }
    // Out of the live set before the free: from the free on, the allocator
    // may hand these bytes to another thread.
    live_.remove(reinterpret_cast<std::uintptr_t>(b.words));
    if (!b.ordered) {
      ok(tidepool_free(b.words));
    } else if (coin(3)) {
      // Freed on another stream, ordered after this block's work by an event.
      CUstream other = pick_stream();
      if (ok(cuda().eventRecord(event_, b.stream)) && ok(cuda().streamWaitEvent(other, event_, 0))) {
        ok(tidepool_free_async(b.words, other));
        totals_.cross_stream_frees.fetch_add(1);
      }
      totals_.ordered_frees.fetch_add(1);
    } else {
      ok(tidepool_free_async(b.words, b.stream));
      totals_.ordered_frees.fetch_add(1);
    }
    totals_.frees.fetch_add(1);
  }

  const int id_;
  CUcontext context_;
  const std::vector<CUstream>& shared_;
  const Kernels& kernels_;
  Totals& totals_;
  LiveRanges& live_;
  std::mt19937_64 rng_;
  CUstream own_ = nullptr;
  CUevent event_ = nullptr;
  std::uint64_t sequence_ = 0;
};

tidepool_stats stats() {
  tidepool_stats s{};
  EXPECT_EQ(tidepool_get_stats(0, &s), TIDEPOOL_OK);
  return s;
}

TEST(Stress, SixteenThreadsKeepEveryBlockIntactAndTheStatsBalance) {
  const Cuda& c = cuda();
  ASSERT_NE(c.handle, nullptr);
  ASSERT_EQ(c.init(0), CUDA_SUCCESS);
  CUdevice device = 0;
  ASSERT_EQ(c.deviceGet(&device, 0), CUDA_SUCCESS);
  CUcontext context = nullptr;
  ASSERT_EQ(c.primaryCtxRetain(&context, device), CUDA_SUCCESS);
  ASSERT_EQ(c.ctxSetCurrent(context), CUDA_SUCCESS);
  const Kernels kernels = register_kernels();
  ASSERT_NE(kernels.fill, nullptr);
  ASSERT_NE(kernels.check, nullptr);

  const tidepool_stats before = stats();
  ASSERT_EQ(before.live_bytes, 0u);
  // Shared streams: two blocking (ordered with the legacy stream), two not.
  std::vector<CUstream> shared(kSharedStreams);
  for (int i = 0; i < kSharedStreams; ++i) {
    ASSERT_EQ(c.streamCreate(&shared[i], i % 2 == 0 ? CU_STREAM_DEFAULT : CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  }

  Totals totals;
  LiveRanges live;
  {
    std::vector<Worker> workers;
    workers.reserve(kThreads);
    for (int i = 0; i < kThreads; ++i) workers.emplace_back(i, context, shared, kernels, totals, live);
    std::vector<std::thread> threads;
    for (Worker& w : workers) threads.emplace_back([&w] { w.run(); });
    for (std::thread& t : threads) t.join();
  }
  ASSERT_EQ(c.ctxSynchronize(), CUDA_SUCCESS);

  EXPECT_EQ(totals.failed_calls.load(), 0u);
  EXPECT_EQ(totals.overlaps.load(), 0u) << "two live blocks shared bytes";
  EXPECT_EQ(totals.kernel_failures.load(), 0u) << "a block's bytes changed while its owner held it (stream check)";
  EXPECT_EQ(totals.host_failures.load(), 0u) << "a block's bytes changed while its owner held it (host check)";
  EXPECT_EQ(live.size(), 0u);
  // The mix really happened: every kind of free, and host checks.
  // About half the operations allocate; a quarter is far below any run's count.
  EXPECT_GT(totals.allocations.load(), static_cast<std::uint64_t>(kThreads * kOpsPerThread / 4));
  EXPECT_EQ(totals.frees.load(), totals.allocations.load());
  EXPECT_GT(totals.ordered_frees.load(), 0u);
  EXPECT_GT(totals.frees.load() - totals.ordered_frees.load(), 0u);
  EXPECT_GT(totals.cross_stream_frees.load(), 0u);
  EXPECT_GT(totals.host_checks.load(), 0u);

  const tidepool_stats after = stats();
  EXPECT_EQ(after.allocations - before.allocations, totals.allocations.load());
  EXPECT_EQ(after.frees - before.frees, totals.frees.load());
  EXPECT_EQ(after.live_bytes, 0u);
  EXPECT_EQ(after.internal_waste_bytes, 0u);
  EXPECT_EQ(after.ooms, 0u);
  EXPECT_EQ(after.passthrough_allocations, 0u);
  EXPECT_GE(after.peak_live_bytes, totals.largest.load());
  EXPECT_LE(after.peak_live_bytes, std::uint64_t{kThreads} * kMaxLivePerThread * (5u << 20));
  EXPECT_GE(after.peak_reserved_bytes, after.peak_live_bytes);

  // A trim gives back what it says it gave back. (Not every page: free
  // neighbours that were pending on different streams stay apart, and a page
  // under two free blocks is kept.)
  std::size_t released = 0;
  ASSERT_EQ(tidepool_trim(0, &released), TIDEPOOL_OK);
  const tidepool_stats trimmed = stats();
  EXPECT_EQ(trimmed.trims, after.trims + 1);
  EXPECT_EQ(trimmed.reserved_bytes + released, after.reserved_bytes);
  EXPECT_EQ(trimmed.live_bytes, 0u);

  for (CUstream s : shared) EXPECT_EQ(c.streamDestroy(s), CUDA_SUCCESS);
  EXPECT_EQ(c.primaryCtxRelease(device), CUDA_SUCCESS);
}

}  // namespace
