// LaunchScanner's table of kernel layouts: every kernel is asked of the
// driver once, however many a program launches and from however many
// threads, and every launch is scanned with its own kernel's layout (never a
// neighbour's in the table, never left unscanned when the table is full).
// The driver here is a function that describes fake kernel handles.
#include "residency/launch_scan.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace tidepool::residency {
namespace {

std::atomic<std::uint64_t> driver_calls{0};

// Kernel handle h (a multiple of 64, as heap objects are) has h % 5 + 1
// parameters of 8 bytes each.
std::size_t parameters_of(CUfunction f) { return (reinterpret_cast<std::uintptr_t>(f) / 64) % 5 + 1; }

CUresult describe(CUfunction f, std::size_t index, std::size_t* offset, std::size_t* size) {
  driver_calls.fetch_add(1, std::memory_order_relaxed);
  if (index >= parameters_of(f)) return CUDA_ERROR_INVALID_VALUE;
  *offset = index * 8;
  *size = 8;
  return CUDA_SUCCESS;
}

CUfunction kernel(std::size_t i) { return reinterpret_cast<CUfunction>(0x7f0000000000ULL + 64 * (i + 1)); }

// The words a launch of `f` passes: parameter p holds 1000 * p + the kernel's index.
struct Launch {
  explicit Launch(std::size_t i) : function(kernel(i)) {
    for (std::size_t p = 0; p < parameters_of(function); ++p) {
      values[p] = 1000 * p + i;
      params[p] = &values[p];
    }
  }
  CUfunction function;
  std::uint64_t values[5]{};  // NOLINT(modernize-avoid-c-arrays): the launch's own argument storage
  void* params[5]{};          // NOLINT(modernize-avoid-c-arrays)
};

// Whether a scan of kernel i's launch gives exactly its words, in order.
bool scans_its_own_words(LaunchScanner& scanner, std::size_t i) {
  Launch launch(i);
  std::vector<std::uintptr_t> words;
  scanner.for_each_word(launch.function, launch.params, nullptr, [&](std::uintptr_t w) { words.push_back(w); });
  if (words.size() != parameters_of(launch.function)) return false;
  for (std::size_t p = 0; p < words.size(); ++p) {
    if (words[p] != 1000 * p + i) return false;
  }
  return true;
}

// Driver calls to learn kernels [0, count): each parameter, and the refusal past the last.
std::uint64_t calls_to_learn(std::size_t count) {
  std::uint64_t calls = 0;
  for (std::size_t i = 0; i < count; ++i) calls += parameters_of(kernel(i)) + 1;
  return calls;
}

// A driver that describes every kernel (`describe`), its calls counted from 0.
driver::Api counting_api() {
  driver::Api api;
  api.funcGetParamInfo = &describe;
  driver_calls = 0;
  return api;
}

TEST(LaunchScanner, EachOfTwentyThousandKernelsIsAskedOnceAndScannedWithItsOwnLayout) {
  // Many more kernels than the lock-free table holds: the rest are kept
  // aside, and still scanned, and still asked only once.
  const driver::Api api = counting_api();
  LaunchScanner scanner(api);
  constexpr std::size_t kKernels = 20000;
  for (int round = 0; round < 2; ++round) {
    for (std::size_t i = 0; i < kKernels; ++i) {
      ASSERT_TRUE(scans_its_own_words(scanner, i)) << "kernel " << i << ", round " << round;
    }
  }
  EXPECT_EQ(driver_calls.load(), calls_to_learn(kKernels));
}

TEST(LaunchScanner, ThreadsLaunchingTheSameNewKernelsAtOnceAskTheDriverOnceForEach) {
  const driver::Api api = counting_api();
  LaunchScanner scanner(api);
  constexpr std::size_t kKernels = 6000;
  constexpr int kThreads = 4;
  std::atomic<std::size_t> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Each thread walks the kernels from a different start, so that
      // threads meet on kernels none has learned yet.
      for (std::size_t n = 0; n < kKernels; ++n) {
        const std::size_t i = (n + static_cast<std::size_t>(t) * kKernels / kThreads) % kKernels;
        if (!scans_its_own_words(scanner, i)) wrong.fetch_add(1);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_EQ(driver_calls.load(), calls_to_learn(kKernels));
}

TEST(LaunchScanner, AKernelTheDriverCannotDescribeIsNotScannedAndTheCallerIsTold) {
  driver::Api api;  // no cuFuncGetParamInfo: an older driver
  LaunchScanner scanner(api);
  Launch launch(3);
  std::size_t words = 0;
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(scanner.for_each_word(launch.function, launch.params, nullptr, [&](std::uintptr_t) { ++words; }));
  }
  EXPECT_EQ(words, 0u);
}

// A CUkernel handle (what the CUDA runtime launches) is not a CUfunction:
// the function query refuses it, as both queries refuse a foreign handle.
CUresult refuse_handle(CUfunction, std::size_t, std::size_t*, std::size_t*) { return CUDA_ERROR_INVALID_HANDLE; }
CUresult refuse_kernel(CUkernel, std::size_t, std::size_t*, std::size_t*) { return CUDA_ERROR_INVALID_HANDLE; }
CUresult describe_kernel(CUkernel k, std::size_t index, std::size_t* offset, std::size_t* size) {
  return describe(reinterpret_cast<CUfunction>(k), index, offset, size);
}

TEST(LaunchScanner, ALibraryKernelLaunchedByItsHandleIsScannedWithTheKernelQuery) {
  driver::Api api;
  api.funcGetParamInfo = &refuse_handle;
  api.kernelGetParamInfo = &describe_kernel;
  LaunchScanner scanner(api);
  for (std::size_t i = 0; i < 8; ++i) EXPECT_TRUE(scans_its_own_words(scanner, i)) << "kernel " << i;
  Launch launch(2);
  EXPECT_TRUE(scanner.for_each_word(launch.function, launch.params, nullptr, [](std::uintptr_t) {}));

  api.kernelGetParamInfo = &refuse_kernel;  // described by neither query
  LaunchScanner blind(api);
  std::size_t words = 0;
  EXPECT_FALSE(blind.for_each_word(launch.function, launch.params, nullptr, [&](std::uintptr_t) { ++words; }));
  EXPECT_EQ(words, 0u);
}

CUresult no_parameters(CUfunction, std::size_t, std::size_t*, std::size_t*) { return CUDA_ERROR_INVALID_VALUE; }

TEST(LaunchScanner, AKernelWithoutParametersIsReadAndNamesNothing) {
  driver::Api api;
  api.funcGetParamInfo = &no_parameters;
  api.kernelGetParamInfo = &refuse_kernel;  // it is a CUfunction, not a library kernel
  LaunchScanner scanner(api);
  void* params[1] = {nullptr};  // NOLINT(modernize-avoid-c-arrays): a launch's argument array
  std::size_t words = 0;
  EXPECT_TRUE(scanner.for_each_word(kernel(0), params, nullptr, [&](std::uintptr_t) { ++words; }));
  EXPECT_TRUE(scanner.for_each_word(kernel(0), nullptr, nullptr, [&](std::uintptr_t) { ++words; }));
  EXPECT_EQ(words, 0u);
}

}  // namespace
}  // namespace tidepool::residency
