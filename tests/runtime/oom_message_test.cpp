// Specification of the out-of-memory message's wording, advice and rate, on
// figures given by hand. runtime_report_test.cpp checks the figures of real
// failures on the sim.
#include "runtime/oom_message.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "util/units.hpp"

namespace tidepool::runtime {
namespace {

using util::GiB;
using util::MiB;

std::string whole(const OomMessage& m) {
  std::string out;
  for (std::size_t i = 0; i < m.count; ++i) out += std::string(m.lines[i], m.lengths[i]) + "\n";
  return out;
}

OomFigures typical() {
  OomFigures f;
  f.device = 1;
  f.requested = 64 * MiB;
  f.reason = "device budget exhausted";
  f.device_limit = 8 * MiB;
  f.device_total = 16 * GiB;
  f.live_bytes = 3 * MiB;
  f.live_blocks = 1;
  f.reserved_bytes = 6 * MiB;
  f.free_bytes = 3 * MiB;
  f.largest_free_block = 2 * MiB;
  f.failures = 1;
  return f;
}

TEST(OomMessage, SaysWhatWasAskedAndWhatThePoolHolds) {
  OomMessage m;
  format_oom_message(typical(), &m);
  ASSERT_EQ(m.count, 5u);
  const std::string text = whole(m);
  EXPECT_NE(text.find("device 1: out of memory: cannot allocate 64.00 MiB (67108864 bytes): device budget exhausted; "
                      "budget 8.00 MiB (device_limit) of the device's 16.00 GiB\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("live 3.00 MiB in 1 allocation(s) (held by the program); reserved 6.00 MiB (held by tidepool), "
                      "of which 3.00 MiB free in the pool, largest free block 2.00 MiB\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("device 1: eviction off; allocations passed through to the driver: 0; failure 1 on this device"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("device 1: to try: raise device_limit (the device has 16.00 GiB); evict:on with a host_cache"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("device 1: or in the program: free what is no longer needed or use a smaller batch\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("fragmented"), std::string::npos) << "3 MiB free cannot hold 64 MiB anyway: " << text;
}

TEST(OomMessage, EveryLineFitsSpdlogsInlineBufferWhateverTheFigures) {
  OomFigures f = typical();
  f.requested = UINT64_MAX;
  f.device_limit = f.device_total = f.live_bytes = f.reserved_bytes = f.free_bytes = UINT64_MAX;
  f.live_blocks = f.passthrough_allocations = f.failures = UINT64_MAX;
  f.eviction = true;
  f.evicted_bytes = f.host_cache_bytes = f.host_cache_limit = f.host_cache_full = UINT64_MAX;
  f.reason = "a driver message far longer than any line could hold, repeated, repeated, repeated, repeated";
  OomMessage m;
  format_oom_message(f, &m);
  for (std::size_t i = 0; i < m.count; ++i) {
    EXPECT_LT(m.lengths[i], OomMessage::kLineBytes);
    EXPECT_EQ(std::string(m.lines[i]).size(), m.lengths[i]) << "lengths match the text";
  }
  // A cut line says so.
  OomFigures cut = typical();
  cut.eviction_off = "x";
  cut.device = 123456789;
  cut.reason = "yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy";
  cut.requested = 123456789012345678;
  format_oom_message(cut, &m);
  std::string headline(m.lines[0], m.lengths[0]);
  EXPECT_LT(headline.size(), OomMessage::kLineBytes);
  EXPECT_EQ(headline.substr(headline.size() - 3), "...") << headline;
}

TEST(OomMessage, AdviceFollowsTheCause) {
  OomMessage m;
  // No budget set: raising it is no advice.
  OomFigures f = typical();
  f.device_limit = f.device_total;
  format_oom_message(f, &m);
  std::string text = whole(m);
  EXPECT_NE(text.find("budget: the whole device, 16.00 GiB"), std::string::npos) << text;
  EXPECT_EQ(text.find("raise device_limit"), std::string::npos) << text;

  // Free memory enough, but no block that large: fragmentation.
  f = typical();
  f.requested = 2 * MiB + 1;
  f.free_bytes = 5 * MiB;
  f.largest_free_block = 2 * MiB;
  format_oom_message(f, &m);
  text = whole(m);
  EXPECT_NE(text.find("; fragmented: compare policies on a recorded trace (trace:PATH, tidepool-replay --policy all)"),
            std::string::npos)
      << text;

  // Eviction on, stopped by the host cache's bound.
  f = typical();
  f.eviction = true;
  f.evicted_bytes = 4 * MiB;
  f.host_cache_bytes = 6 * MiB;
  f.host_cache_limit = 4 * MiB;
  f.host_cache_full = 2;
  format_oom_message(f, &m);
  text = whole(m);
  EXPECT_NE(text.find("evicted to host 4.00 MiB (host cache: 6.00 MiB pinned, bound 4.00 MiB)"), std::string::npos)
      << text;
  EXPECT_NE(text.find("raise host_cache (full at 4.00 MiB)"), std::string::npos) << text;
  EXPECT_EQ(text.find("evict:on"), std::string::npos) << text;

  // Eviction asked for but unavailable: the reason, no advice to turn it on.
  f = typical();
  f.eviction_off = "the device has no host-located VMM";
  format_oom_message(f, &m);
  text = whole(m);
  EXPECT_NE(text.find("eviction unavailable (the device has no host-located VMM)"), std::string::npos) << text;
  EXPECT_EQ(text.find("evict:on"), std::string::npos) << text;
  // With no setting to suggest, the program's line is the advice.
  f.device_limit = f.device_total;
  format_oom_message(f, &m);
  ASSERT_EQ(m.count, 4u) << whole(m);
  EXPECT_EQ(std::string(m.lines[3]), "device 1: to try: free what is no longer needed or use a smaller batch");

  // Larger than the whole device: only that.
  f = typical();
  f.requested = 32 * GiB;
  format_oom_message(f, &m);
  text = whole(m);
  EXPECT_NE(text.find("to try: no setting makes room for more than the whole device (16.00 GiB)"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("raise device_limit"), std::string::npos) << text;
}

TEST(OomMessage, TheLastFullMessageSaysLaterOnesAreOnlyCounted) {
  OomFigures f = typical();
  OomMessage m;
  f.failures = kFullMessages - 1;
  format_oom_message(f, &m);
  EXPECT_EQ(m.count, 5u);
  f.failures = kFullMessages;
  format_oom_message(f, &m);
  ASSERT_EQ(m.count, 6u);
  EXPECT_NE(std::string(m.lines[5]).find("only counted"), std::string::npos) << m.lines[5];
}

TEST(OomMessage, ARetryLoopGetsThreeMessagesThenACountAtEachPowerOfTen) {
  std::uint64_t full = 0;
  std::uint64_t counted = 0;
  for (std::uint64_t nth = 1; nth <= 100000; ++nth) {
    switch (oom_verbosity(nth)) {
      case OomVerbosity::full: ++full; break;
      case OomVerbosity::count:
        ++counted;
        EXPECT_TRUE(nth == 10 || nth == 100 || nth == 1000 || nth == 10000 || nth == 100000) << nth;
        break;
      case OomVerbosity::nothing: break;
    }
  }
  EXPECT_EQ(full, kFullMessages);
  EXPECT_EQ(counted, 5u);
  char line[OomMessage::kLineBytes];
  OomFigures f = typical();
  f.failures = 1000;
  const std::size_t n = format_oom_count(f, line, sizeof line);
  EXPECT_EQ(std::string(line, n),
            "device 1: out of memory again: 1000 allocations have failed on this device; the last asked for 64.00 MiB "
            "with 3.00 MiB live, 6.00 MiB reserved, budget 8.00 MiB");
}

TEST(OomMessage, SizesReadAsUtilFormatSizeWritesThem) {
  for (std::uint64_t bytes :
       {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{1023}, std::uint64_t{1024}, std::uint64_t{1536},
        std::uint64_t{3 * MiB + 5}, std::uint64_t{GiB}, std::uint64_t{1} << 40, std::uint64_t{1} << 50, UINT64_MAX}) {
    char text[32];
    EXPECT_EQ(std::string(format_bytes(bytes, text, sizeof text)), util::format_size(bytes)) << bytes;
  }
}

}  // namespace
}  // namespace tidepool::runtime
