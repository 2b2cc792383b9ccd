// CallSites: a tag per return address (stable, distinct, 255 of them, shared
// safely between threads), names from the loader, and the owners a reader
// sees.
#include "runtime/call_sites.hpp"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "support/program_code.hpp"

namespace tidepool::runtime {
namespace {

using testing::code_of_this_program;

TEST(CallSites, EachCallerKeepsOneTagAndCallersDiffer) {
  auto sites = std::make_unique<CallSites>();
  EXPECT_EQ(sites->tag(0), 0) << "a caller not known is tag 0";
  const std::uint16_t a = sites->tag(0x7f0000001234);
  const std::uint16_t b = sites->tag(0x7f0000005678);
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, 2);
  EXPECT_EQ(sites->tag(0x7f0000001234), a);
  EXPECT_EQ(sites->tag(0x7f0000005678), b);
  EXPECT_EQ(sites->caller(a), 0x7f0000001234u);
  EXPECT_EQ(sites->caller(b), 0x7f0000005678u);
  EXPECT_EQ(sites->caller(0), 0u);
  EXPECT_EQ(sites->count(), 3u);
}

TEST(CallSites, PastTheLastTagNewCallersShareTagZero) {
  auto sites = std::make_unique<CallSites>();
  std::vector<std::uint16_t> tags;
  // More callers than the table has slots: past the last tag they claim
  // none, so later lookups stay short and never run out of room.
  for (std::uintptr_t i = 1; i <= 3000; ++i) tags.push_back(sites->tag(0x400000 + i * 16));
  for (std::size_t i = 0; i < CallSites::kTags - 1; ++i) EXPECT_EQ(tags[i], i + 1) << i;
  for (std::size_t i = CallSites::kTags - 1; i < tags.size(); ++i) EXPECT_EQ(tags[i], 0) << i;
  // And they stay so, while the early ones keep theirs.
  EXPECT_EQ(sites->tag(0x400000 + 3000 * 16), 0);
  EXPECT_EQ(sites->tag(0x400000 + 16), 1);
  EXPECT_EQ(sites->count(), CallSites::kTags);
}

TEST(CallSites, ThreadsTaggingTheSameCallersAgree) {
  auto sites = std::make_unique<CallSites>();
  constexpr int kThreads = 4;
  constexpr std::uintptr_t kCallers = 200;
  std::vector<std::map<std::uintptr_t, std::uint16_t>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        for (std::uintptr_t i = 0; i < kCallers; ++i) {
          // Each thread walks the callers in its own order.
          const std::uintptr_t caller = 0x10000 + ((i * (2 * t + 1) + round) % kCallers) * 64;
          const std::uint16_t tag = sites->tag(caller);
          auto [it, inserted] = seen[t].emplace(caller, tag);
          if (!inserted) {
            EXPECT_EQ(it->second, tag);
          }
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  std::set<std::uint16_t> distinct;
  for (const auto& [caller, tag] : seen[0]) {
    for (int t = 1; t < kThreads; ++t) EXPECT_EQ(seen[t].at(caller), tag) << caller;
    EXPECT_NE(tag, 0);
    EXPECT_EQ(sites->caller(tag), caller);
    distinct.insert(tag);
  }
  EXPECT_EQ(distinct.size(), kCallers);
}

TEST(CallSites, DescribeNamesTheLibraryAndTheFunction) {
  // A C library function no sanitizer intercepts: found in libc, by name.
  void* in_libc = ::dlsym(RTLD_DEFAULT, "gnu_get_libc_version");
  ASSERT_NE(in_libc, nullptr);
  const CallerName libc = CallSites::describe(reinterpret_cast<std::uintptr_t>(in_libc) + 8);
  EXPECT_TRUE(libc.library.starts_with("libc.so")) << libc.library;
  EXPECT_EQ(libc.function, "gnu_get_libc_version");
  EXPECT_FALSE(libc.program);
  EXPECT_GT(libc.offset, 0u);

  // Code of the executable itself: the program, by its own name.
  const CallerName self = CallSites::describe(reinterpret_cast<std::uintptr_t>(&code_of_this_program) + 1);
  EXPECT_TRUE(self.program);
  EXPECT_EQ(self.library, program_invocation_short_name);

  EXPECT_TRUE(CallSites::describe(0).library.empty());
  EXPECT_TRUE(CallSites::describe(16).library.empty()) << "no object is loaded at the first page";
}

TEST(CallSites, OwnerKindsAreWhatAReaderAsksAbout) {
  EXPECT_EQ(CallSites::owner_kind("libc10_cuda.so", false), "framework");
  EXPECT_EQ(CallSites::owner_kind("/opt/torch/lib/libtorch_cuda.so", false), "framework");
  EXPECT_EQ(CallSites::owner_kind("libcaffe.so.1.0.0", false), "framework");
  EXPECT_EQ(CallSites::owner_kind("libcublasLt.so.12", false), "cuBLAS");
  EXPECT_EQ(CallSites::owner_kind("libcublas.so.12", false), "cuBLAS");
  EXPECT_EQ(CallSites::owner_kind("libcudnn_ops.so.9", false), "cuDNN");
  EXPECT_EQ(CallSites::owner_kind("libnccl.so.2", false), "NCCL");
  EXPECT_EQ(CallSites::owner_kind("libcufft.so.11", false), "CUDA library");
  EXPECT_EQ(CallSites::owner_kind("libcudart.so.12", false), "CUDA runtime");
  EXPECT_EQ(CallSites::owner_kind("libtidepool.so", false), "tidepool");
  EXPECT_EQ(CallSites::owner_kind("python3.12", true), "program");
  EXPECT_EQ(CallSites::owner_kind("caffe", false), "program") << "a name without .so is an executable's";
  EXPECT_EQ(CallSites::owner_kind("libffi.so.8", false), "other");
}

}  // namespace
}  // namespace tidepool::runtime
