// Specification of TIDEPOOL_CONF parsing: every key's forms and every bad input.
#include "runtime/config.hpp"

#include <gtest/gtest.h>

namespace tidepool::runtime {
namespace {

using util::GiB;
using util::MiB;

TEST(Config, EmptyMeansEveryDefault) {
  const Config c = parse_config("");
  EXPECT_FALSE(c.passthrough);
  EXPECT_FALSE(c.device_limit.has_value());
  EXPECT_EQ(c.policy, "best_fit");
  EXPECT_FALSE(c.evict);
  EXPECT_EQ(c.small_size, 128u * 1024);
  EXPECT_EQ(c.hold_slack, 3u);
  EXPECT_EQ(c.log, LogLevel::warn);
  EXPECT_TRUE(c.report.empty());
  EXPECT_TRUE(parse_config("   ").error.empty());
}

TEST(Config, ParsesEveryKey) {
  const Config c = parse_config(
      "device_limit:8GiB, policy:two_ended ,evict:on,small_size:512KiB,hold_slack:10%,"
      "report:run.json,trace:run.csv,log:debug,log_file:/tmp/tp.log,cuda_lib:/opt/libcuda.so.1");
  ASSERT_FALSE(c.passthrough) << c.error;
  ASSERT_TRUE(c.device_limit.has_value());
  EXPECT_EQ(c.device_limit->bytes, 8 * GiB);
  EXPECT_EQ(c.policy, "two_ended");
  EXPECT_TRUE(c.evict);
  EXPECT_EQ(c.small_size, 512u * 1024);
  EXPECT_EQ(c.hold_slack, 10u);
  EXPECT_EQ(c.report, "run.json");
  EXPECT_EQ(c.trace, "run.csv");
  EXPECT_EQ(c.log, LogLevel::debug);
  EXPECT_EQ(c.log_file, "/tmp/tp.log");
  EXPECT_EQ(c.cuda_lib, "/opt/libcuda.so.1");
}

TEST(Config, DeviceLimitTakesAPercentOfTheDevice) {
  const Config c = parse_config("device_limit:25%");
  ASSERT_TRUE(c.device_limit.has_value());
  EXPECT_TRUE(c.device_limit->is_percent);
  EXPECT_EQ(c.device_limit->resolve(16 * GiB), 4 * GiB);
}

struct BadCase {
  const char* conf;
  const char* must_mention;
};

class BadConfig : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadConfig, IsOneClearLineNamingTheKeyAndPassesThrough) {
  const Config c = parse_config(GetParam().conf);
  EXPECT_TRUE(c.passthrough) << GetParam().conf;
  EXPECT_NE(c.error.find(GetParam().must_mention), std::string::npos) << c.error;
  EXPECT_EQ(c.error.find('\n'), std::string::npos);
  EXPECT_EQ(c.error.rfind("tidepool: TIDEPOOL_CONF: ", 0), 0u) << c.error;
  EXPECT_NE(c.error.find("passing all calls through"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(
    EveryBadInput, BadConfig,
    ::testing::Values(BadCase{"polcy:best_fit", "unknown key \"polcy\""},
                      BadCase{"device_limit:lots", "\"device_limit\""}, BadCase{"device_limit:0", "\"device_limit\""},
                      BadCase{"device_limit:150%", "\"device_limit\""},
                      BadCase{"device_limit:-1GiB", "\"device_limit\""}, BadCase{"policy:fastest", "\"policy\""},
                      BadCase{"evict:maybe", "\"evict\""}, BadCase{"evict:", "\"evict\""},
                      BadCase{"small_size:10%", "\"small_size\""}, BadCase{"hold_slack:5", "\"hold_slack\""},
                      BadCase{"hold_slack:101%", "\"hold_slack\""}, BadCase{"hold_slack:-1%", "\"hold_slack\""},
                      BadCase{"hold_slack:%", "\"hold_slack\""}, BadCase{"log:verbose", "\"log\""},
                      BadCase{"report:", "\"report\""}, BadCase{"policy:best_fit,policy:first_fit", "given twice"},
                      BadCase{"evict", "no ':'"}, BadCase{"evict:on,", "empty item"},
                      BadCase{",evict:on", "empty item"}, BadCase{"evict:on,,policy:best_fit", "empty item"}));

TEST(Config, OptionsTableGeneratesHelpAndMarkdown) {
  const std::string markdown = options_markdown();
  const std::string help = options_help();
  for (const OptionInfo* o = options_begin(); o != options_end(); ++o) {
    EXPECT_NE(markdown.find(std::string("`") + o->key + "`"), std::string::npos) << o->key;
    EXPECT_NE(help.find(o->key), std::string::npos) << o->key;
    // Every default parses: the table cannot hold a value its own parser rejects.
    if (*o->default_value != '\0') {
      EXPECT_FALSE(parse_config(std::string(o->key) + ":" + o->default_value).passthrough) << o->key;
    }
  }
}

}  // namespace
}  // namespace tidepool::runtime
