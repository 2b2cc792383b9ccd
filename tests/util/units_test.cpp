// Specification of the size grammar shared by TIDEPOOL_CONF, tool flags and env.
#include "util/units.hpp"

#include <gtest/gtest.h>

using tidepool::util::align_up;
using tidepool::util::GiB;
using tidepool::util::MiB;
using tidepool::util::parse_size;

TEST(ParseSize, AcceptsBinaryAndDecimalUnits) {
  EXPECT_EQ(parse_size("8GiB")->bytes, 8 * GiB);
  EXPECT_EQ(parse_size("512MiB")->bytes, 512 * MiB);
  EXPECT_EQ(parse_size("4KiB")->bytes, 4096u);
  EXPECT_EQ(parse_size("2GB")->bytes, 2000000000u);
  EXPECT_EQ(parse_size("3MB")->bytes, 3000000u);
  EXPECT_EQ(parse_size("7KB")->bytes, 7000u);
  EXPECT_EQ(parse_size("123B")->bytes, 123u);
  EXPECT_EQ(parse_size("123")->bytes, 123u);
  EXPECT_EQ(parse_size(" 1.5GiB ")->bytes, GiB + GiB / 2);
}

TEST(ParseSize, PercentResolvesAgainstTheWhole) {
  auto spec = parse_size("25%");
  ASSERT_TRUE(spec);
  EXPECT_TRUE(spec->is_percent);
  EXPECT_EQ(spec->resolve(16 * GiB), 4 * GiB);
  EXPECT_EQ(parse_size("100%")->resolve(1000), 1000u);
}

TEST(ParseSize, RejectsMalformedInput) {
  for (const char* bad :
       {"", "GiB", "-1GiB", "1 parsec", "1e9", "101%", "1..5MiB", "0x10", "%", "99999999999999999999999TiB"}) {
    EXPECT_FALSE(parse_size(bad)) << bad;
  }
}

TEST(ParseSize, ValuesFrom2To63OnAreExactNotSaturated) {
  EXPECT_EQ(parse_size("10000000000000000000")->bytes, 10000000000000000000ULL);
  EXPECT_EQ(parse_size("9223372036854775808")->bytes, 9223372036854775808ULL);
  EXPECT_EQ(parse_size("8EiB"), std::nullopt);         // not a unit
  EXPECT_EQ(parse_size("16777216TiB"), std::nullopt);  // 2^64: past the largest size
  EXPECT_EQ(parse_size("18446744073709551616"), std::nullopt);
}

TEST(Align, RoundsUpToPowersOfTwo) {
  EXPECT_EQ(align_up(1, 512), 512u);
  EXPECT_EQ(align_up(512, 512), 512u);
  EXPECT_EQ(align_up(513, 512), 1024u);
  EXPECT_EQ(align_up(0, 2 * MiB), 0u);
}
