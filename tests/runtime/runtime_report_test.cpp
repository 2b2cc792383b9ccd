// A real Runtime on the sim: the size classes it counts, the exit summary at
// log:info, and the out-of-memory message of real failures, whose every
// figure must be the pool's own. Each test logs to a file of its own
// (log_file), read back after; ctest runs each test in a process of its own,
// so the process-wide logger one test configures is never another's.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/oom_message.hpp"
#include "runtime/runtime.hpp"
#include "support/program_code.hpp"
#include "util/units.hpp"

namespace tidepool::runtime {
namespace {

using testing::code_of_this_program;

using util::format_size;
using util::MiB;

class RuntimeReport : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::path(::testing::TempDir()) / ("tidepool-runtime-report-" + std::to_string(::getpid()) + "-" +
                                                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  [[nodiscard]] std::string path(const char* name) const { return (dir_ / name).string(); }

  Config config(LogLevel level) const {
    Config c = parse_config("");
    c.cuda_lib = TIDEPOOL_SIM_LIBRARY;
    c.log = level;
    c.log_file = path("log.txt");
    return c;
  }

  [[nodiscard]] std::string log() const {
    flush_logging();
    std::ifstream in(path("log.txt"));
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

  static std::size_t occurrences(const std::string& text, const std::string& what) {
    std::size_t n = 0;
    for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  }

  std::filesystem::path dir_;
};

TEST_F(RuntimeReport, SizeClassesCountThePoolsRealAllocations) {
  auto rt = Runtime::create(config(LogLevel::warn));
  Allocator* a = rt->allocator(0);
  ASSERT_NE(a, nullptr);
  std::vector<std::uintptr_t> small;
  for (int i = 0; i < 5; ++i) {
    auto p = a->allocate(200 + i, 0, false);
    ASSERT_TRUE(p.ok());
    small.push_back(p.value());
  }
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(a->deallocate(small[i], 0, false).ok());
  auto large = a->allocate(3 * MiB, 0, false);
  ASSERT_TRUE(large.ok());

  const auto j = nlohmann::ordered_json::parse(report_json(rt->report()));
  const auto& classes = j["devices"][0]["size_classes"];
  ASSERT_EQ(classes.size(), 2u) << classes.dump();
  EXPECT_EQ(classes[0]["max_bytes"], 512);
  EXPECT_EQ(classes[0]["allocations"], 5);
  EXPECT_EQ(classes[0]["frees"], 3);
  EXPECT_EQ(classes[0]["live"], 2);
  EXPECT_EQ(classes[0]["peak_live"], 5);
  EXPECT_EQ(classes[0]["requested_bytes"], 200 + 201 + 202 + 203 + 204);
  EXPECT_EQ(classes[1]["min_bytes"], 2 * MiB + 1);
  EXPECT_EQ(classes[1]["allocations"], 1);
  EXPECT_EQ(classes[1]["requested_bytes"], 3 * MiB);
  // The classes add up to the device's own counts.
  EXPECT_EQ(j["devices"][0]["allocations"], 6);
  EXPECT_EQ(j["devices"][0]["frees"], 3);
  EXPECT_EQ(j["devices"][0]["page_bytes"], 2 * MiB);
  EXPECT_EQ(j["devices"][0]["page_creates"].get<int>(), j["devices"][0]["reserved_bytes"].get<int>() / (2 * MiB));
}

TEST_F(RuntimeReport, AnOversizeAllocationFailsAndTheLogHasEveryFigure) {
  Config c = config(LogLevel::warn);
  c.device_limit = util::SizeSpec{8 * MiB};
  auto rt = Runtime::create(c);
  Allocator* a = rt->allocator(0);
  ASSERT_NE(a, nullptr);
  auto first = a->allocate(3 * MiB, 0, false);
  auto second = a->allocate(3 * MiB + 100, 0, false);
  ASSERT_TRUE(first.ok() && second.ok());
  ASSERT_TRUE(a->deallocate(first.value(), 0, false).ok());

  auto failed = a->allocate(64 * MiB, 0, false);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().error(), util::Error::out_of_memory);
  EXPECT_EQ(a->out_of_memory_failures(), 1u);

  // Nothing has run since: the pool's figures now are those of the message.
  const pool::PoolStats s = a->pool().stats();
  const std::string text = log();
  EXPECT_NE(text.find("device 0: out of memory: cannot allocate 64.00 MiB (67108864 bytes): "), std::string::npos)
      << text;
  EXPECT_NE(text.find("budget 8.00 MiB (device_limit) of the device's " + format_size(a->device_total_bytes())),
            std::string::npos)
      << text;
  EXPECT_EQ(s.live_bytes, 3 * MiB + 100);
  EXPECT_NE(text.find("live " + format_size(s.live_bytes) + " in 1 allocation(s) (held by the program)"),
            std::string::npos)
      << text;
  ASSERT_GT(s.reserved_bytes, 0u);
  EXPECT_NE(text.find("reserved " + format_size(s.reserved_bytes) + " (held by tidepool), of which " +
                      format_size(s.free_bytes) + " free in the pool, largest free block " +
                      format_size(s.largest_free_block)),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("eviction off; allocations passed through to the driver: 0; failure 1 on this device"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("to try: raise device_limit (the device has " + format_size(a->device_total_bytes()) + ")"),
            std::string::npos)
      << text;
  EXPECT_EQ(occurrences(text, "\n"), 5u) << "five lines: " << text;

  // The report counts it too, in its size class.
  const auto j = nlohmann::ordered_json::parse(report_json(rt->report()));
  EXPECT_EQ(j["devices"][0]["ooms"], 1);
  const auto& classes = j["devices"][0]["size_classes"];
  ASSERT_FALSE(classes.empty());
  EXPECT_EQ(classes.back()["max_bytes"], 64 * MiB);
  EXPECT_EQ(classes.back()["ooms"], 1);
  EXPECT_EQ(classes.back()["allocations"], 0);

  // The pool goes on working.
  auto after = a->allocate(1 * MiB, 0, false);
  EXPECT_TRUE(after.ok());
}

TEST_F(RuntimeReport, ARetryLoopDoesNotFloodTheLog) {
  Config c = config(LogLevel::warn);
  c.device_limit = util::SizeSpec{4 * MiB};
  auto rt = Runtime::create(c);
  Allocator* a = rt->allocator(0);
  ASSERT_NE(a, nullptr);
  for (int i = 0; i < 100; ++i) ASSERT_FALSE(a->allocate(16 * MiB, 0, false).ok());
  EXPECT_EQ(a->out_of_memory_failures(), 100u);
  const std::string text = log();
  EXPECT_EQ(occurrences(text, "out of memory: cannot allocate"), kFullMessages) << text;
  EXPECT_EQ(occurrences(text, "only counted"), 1u) << text;
  EXPECT_EQ(occurrences(text, "out of memory again"), 2u) << text;
  EXPECT_NE(text.find("out of memory again: 10 allocations have failed on this device"), std::string::npos) << text;
  EXPECT_NE(text.find("out of memory again: 100 allocations have failed on this device"), std::string::npos) << text;
  EXPECT_EQ(occurrences(text, "\n"), 5 * kFullMessages + 1 + 2) << text;
}

TEST_F(RuntimeReport, BelowWarnTheMessageIsNotBuiltButTheFailureIsCounted) {
  Config c = config(LogLevel::error);
  c.device_limit = util::SizeSpec{4 * MiB};
  auto rt = Runtime::create(c);
  Allocator* a = rt->allocator(0);
  ASSERT_NE(a, nullptr);
  EXPECT_FALSE(a->allocate(16 * MiB, 0, false).ok());
  EXPECT_EQ(a->out_of_memory_failures(), 1u);
  EXPECT_EQ(log().find("out of memory"), std::string::npos) << log();
}

TEST_F(RuntimeReport, AFailureUnderEvictionShowsTheHostSide) {
  Config c = config(LogLevel::warn);
  c.device_limit = util::SizeSpec{8 * MiB};
  c.evict = true;
  c.host_cache = 4 * MiB;
  auto rt = Runtime::create(c);
  Allocator* a = rt->allocator(0);
  ASSERT_NE(a, nullptr);
  if (a->residency() == nullptr) GTEST_SKIP() << "no eviction on this sim: " << a->eviction_off_reason();
  std::vector<std::uintptr_t> live;
  // Live data past the budget, until the host cache's bound stops eviction.
  util::Status last;
  for (int i = 0; i < 8; ++i) {
    auto p = a->allocate(4 * MiB, 0, false);
    if (!p) {
      last = p.status();
      break;
    }
    live.push_back(p.value());
  }
  ASSERT_EQ(last.error(), util::Error::out_of_memory) << "8 MiB budget and 4 MiB of host cache cannot hold 32 MiB";
  const residency::ResidencyStats r = a->residency()->stats();
  const std::string text = log();
  EXPECT_GT(r.host_resident_bytes, 0u) << text;
  EXPECT_NE(text.find("evicted to host " + format_size(r.host_resident_bytes) + " (host cache: "), std::string::npos)
      << text;
  EXPECT_NE(text.find("bound 4.00 MiB)"), std::string::npos) << text;
  if (r.host_cache_full > 0) {
    EXPECT_NE(text.find("raise host_cache (full at 4.00 MiB)"), std::string::npos) << text;
  }
  EXPECT_EQ(text.find("evict:on"), std::string::npos) << "eviction is on already: " << text;
}

TEST_F(RuntimeReport, ExitSummaryAtInfoGivesEachDevicesFiguresAndWhereTheFilesWent) {
  Config c = config(LogLevel::info);
  c.device_limit = util::SizeSpec{8 * MiB};
  c.report = path("run.json");
  c.trace = path("run.csv");
  auto rt = Runtime::create(c);
  Allocator* a = rt->allocator(0);
  ASSERT_NE(a, nullptr);
  auto small = a->allocate(300, 0, false);
  auto large = a->allocate(3 * MiB, 0, false);
  ASSERT_TRUE(small.ok() && large.ok());
  ASSERT_TRUE(a->deallocate(small.value(), 0, false).ok());
  ASSERT_FALSE(a->allocate(64 * MiB, 0, false).ok());
  const pool::PoolStats s = a->pool().stats();
  rt->finish();

  const std::string text = log();
  const std::size_t at = text.find("device 0 at exit: ");
  ASSERT_NE(at, std::string::npos) << text;
  const std::string paragraph = text.substr(at, text.find('\n', at) - at);
  EXPECT_NE(paragraph.find("device 0 at exit: 2 allocations, 1 free, 1 block still live (3.00 MiB); "
                           "1 allocation failed for lack of memory. "),
            std::string::npos)
      << paragraph;
  char utilization[32];
  std::snprintf(utilization, sizeof utilization, "%.1f%%",
                100.0 * static_cast<double>(3 * MiB + 300) / static_cast<double>(s.peak_reserved_bytes));
  EXPECT_NE(paragraph.find("Peak live " + format_size(3 * MiB + 300) + " against peak reserved " +
                           format_size(s.peak_reserved_bytes) + ": utilization " + utilization),
            std::string::npos)
      << paragraph;
  EXPECT_NE(paragraph.find("largest free block " + format_size(s.largest_free_block)), std::string::npos) << paragraph;
  EXPECT_NE(paragraph.find("Driver: " + std::to_string(s.maps) + " page map"), std::string::npos) << paragraph;
  EXPECT_NE(paragraph.find("Budget 8.00 MiB of the device's " + format_size(a->device_total_bytes())),
            std::string::npos)
      << paragraph;
  // Who held the peak (allocations made here without a caller).
  EXPECT_NE(paragraph.find(". At the live peak: callers not known " + format_size(3 * MiB + 300)), std::string::npos)
      << paragraph;
  EXPECT_NE(
      text.find("at exit: report written to '" + path("run.json") + "'; trace recorded to '" + path("run.csv") + "'"),
      std::string::npos)
      << text;

  // The exit report is the one the summary describes.
  std::ifstream in(path("run.json"));
  const auto j = nlohmann::ordered_json::parse(in);
  EXPECT_EQ(j["run"]["at_exit"], true);
  EXPECT_EQ(j["devices"][0]["allocations"], 2);
  EXPECT_EQ(j["devices"][0]["ooms"], 1);
  EXPECT_EQ(j["run"]["config"]["report"], path("run.json"));
  EXPECT_EQ(j["run"]["config"]["device_limit"], 8 * MiB);
}

TEST_F(RuntimeReport, NoSummaryBelowInfo) {
  Config c = config(LogLevel::warn);
  c.report = path("run.json");
  auto rt = Runtime::create(c);
  ASSERT_NE(rt->allocator(0), nullptr);
  rt->finish();
  EXPECT_EQ(log().find("at exit"), std::string::npos) << log();
  EXPECT_TRUE(std::filesystem::exists(path("run.json"))) << "the report is written all the same";
}

TEST_F(RuntimeReport, TheSummarySaysWhenTheReportCouldNotBeWritten) {
  Config c = config(LogLevel::info);
  c.report = path("missing-dir/run.json");
  auto rt = Runtime::create(c);
  rt->finish();
  const std::string text = log();
  EXPECT_NE(text.find("at exit: no device memory was allocated through tidepool"), std::string::npos) << text;
  EXPECT_NE(text.find("the report could not be written to '" + path("missing-dir/run.json") + "'"), std::string::npos)
      << text;
}

// Two call sites of this program and one of libc (any address inside a
// loaded function stands for a return address there): the report groups
// them by library, and what each held at the live peak adds up to the peak.
TEST_F(RuntimeReport, OwnersCountEachCallersMemoryAndAddUpAtThePeak) {
  Config c = config(LogLevel::warn);
  c.device_limit = util::SizeSpec{64 * MiB};
  auto rt = Runtime::create(c);
  Allocator* a = rt->allocator(0);
  ASSERT_NE(a, nullptr);
  const auto here = reinterpret_cast<std::uintptr_t>(&code_of_this_program) + 1;
  const auto there = reinterpret_cast<std::uintptr_t>(&code_of_this_program) + 2;
  const auto in_libc = reinterpret_cast<std::uintptr_t>(::dlsym(RTLD_DEFAULT, "gnu_get_libc_version")) + 8;
  ASSERT_NE(in_libc, 8u);

  std::vector<std::uintptr_t> mine;
  for (int i = 0; i < 3; ++i) mine.push_back(a->allocate(4 * MiB, 0, false, here).value());
  const std::uintptr_t other = a->allocate(2 * MiB, 0, false, there).value();
  const std::uintptr_t lib = a->allocate(1 * MiB, 0, false, in_libc).value();
  // The peak is here: 12 + 2 + 1 MiB. Then `here` frees two and `there` grows.
  ASSERT_TRUE(a->deallocate(mine[0], 0, false).ok());
  ASSERT_TRUE(a->deallocate(mine[1], 0, false).ok());
  const std::uintptr_t more = a->allocate(6 * MiB, 0, false, there).value();
  EXPECT_FALSE(a->allocate(512 * MiB, 0, false, in_libc).ok()) << "past the budget";
  ASSERT_TRUE(a->deallocate(other, 0, false).ok());
  (void)lib;
  (void)more;

  const auto j = nlohmann::ordered_json::parse(report_json(rt->report()));
  const auto& device = j["devices"][0];
  EXPECT_EQ(device["peak_live_bytes"], 15 * MiB);
  const auto& owners = device["owners"];
  ASSERT_EQ(owners.size(), 2u) << owners.dump(1);
  // The program first: it held 14 MiB at the peak.
  const auto& program = owners[0];
  EXPECT_EQ(program["library"], program_invocation_short_name);
  EXPECT_EQ(program["owner"], "program");
  EXPECT_EQ(program["allocations"], 5);
  EXPECT_EQ(program["requested_bytes"], (12 + 2 + 6) * MiB);
  EXPECT_EQ(program["live_bytes"], (4 + 6) * MiB);
  EXPECT_EQ(program["live_at_peak_bytes"], 14 * MiB);
  ASSERT_EQ(program["call_sites"].size(), 2u);
  const auto& first = program["call_sites"][0];
  const auto& second = program["call_sites"][1];
  EXPECT_EQ(first["allocations"], 3);
  EXPECT_EQ(first["live_at_peak_bytes"], 12 * MiB);
  EXPECT_EQ(first["peak_live_bytes"], 12 * MiB);
  EXPECT_EQ(first["live_bytes"], 4 * MiB);
  EXPECT_EQ(second["allocations"], 2);
  EXPECT_EQ(second["live_at_peak_bytes"], 2 * MiB);
  EXPECT_EQ(second["peak_live_bytes"], 8 * MiB) << "its own peak came after the device's";
  EXPECT_EQ(second["live_bytes"], 6 * MiB);

  const auto& libc = owners[1];
  EXPECT_TRUE(libc["library"].get<std::string>().starts_with("libc.so")) << libc.dump();
  EXPECT_EQ(libc["owner"], "other");
  EXPECT_EQ(libc["allocations"], 1);
  EXPECT_EQ(libc["failures"], 1);
  EXPECT_EQ(libc["live_at_peak_bytes"], 1 * MiB);
  EXPECT_EQ(libc["call_sites"][0]["function"], "gnu_get_libc_version");
  EXPECT_TRUE(libc["call_sites"][0]["offset"].get<std::string>().starts_with("0x"));

  std::uint64_t at_peak = 0;
  for (const auto& o : owners) at_peak += o["live_at_peak_bytes"].get<std::uint64_t>();
  EXPECT_EQ(at_peak, device["peak_live_bytes"].get<std::uint64_t>());
}

// Allocations whose caller is not given go to one owner, named as not known.
TEST_F(RuntimeReport, AnAllocationWithoutACallerIsOwnedByNotKnown) {
  auto rt = Runtime::create(config(LogLevel::warn));
  Allocator* a = rt->allocator(0);
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(a->allocate(3 * MiB, 0, false).ok());
  const auto j = nlohmann::ordered_json::parse(report_json(rt->report()));
  const auto& owners = j["devices"][0]["owners"];
  ASSERT_EQ(owners.size(), 1u) << owners.dump(1);
  EXPECT_TRUE(owners[0]["library"].is_null());
  EXPECT_EQ(owners[0]["owner"], "not known");
  EXPECT_EQ(owners[0]["live_at_peak_bytes"], 3 * MiB);
  EXPECT_TRUE(owners[0]["call_sites"][0]["function"].is_null());
}

}  // namespace
}  // namespace tidepool::runtime
