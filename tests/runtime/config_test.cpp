// Specification of TIDEPOOL_CONF parsing: every key's forms and every bad input.
#include "runtime/config.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include "runtime/allocator.hpp"

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

// One TIDEPOOL_CONF for every process of a job (one per GPU under
// torch.distributed): each writes its own files.
TEST(Config, APercentPInAPathIsTheProcessId) {
  const Config c = parse_config("report:run-%p.json,trace:/tmp/%p/t.csv,log_file:100%%-%p.log");
  ASSERT_FALSE(c.passthrough) << c.error;
  const std::string pid = std::to_string(::getpid());
  EXPECT_EQ(c.report, "run-" + pid + ".json");
  EXPECT_EQ(c.trace, "/tmp/" + pid + "/t.csv");
  EXPECT_EQ(c.log_file, "100%-" + pid + ".log");
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
  // What is wrong, not what follows: the preload and tidepool-run each say
  // what they do about it.
  EXPECT_EQ(c.error.find("passing"), std::string::npos) << c.error;
  const std::string line = passthrough_line(c);
  EXPECT_EQ(line.rfind(c.error, 0), 0u) << line;
  EXPECT_NE(line.find("; passing all calls through to the driver"), std::string::npos) << line;
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
                      BadCase{"report:", "\"report\""}, BadCase{"report:run-%d.json", "%p for the process id"},
                      BadCase{"trace:run%", "\"trace\""}, BadCase{"policy:best_fit,policy:first_fit", "given twice"},
                      BadCase{"evict", "no ':'"}, BadCase{"evict:on,", "empty item"},
                      BadCase{",evict:on", "empty item"}, BadCase{"evict:on,,policy:best_fit", "empty item"},
                      // Values that parse but cannot work.
                      BadCase{"device_limit:1B", "\"device_limit\""}, BadCase{"device_limit:4095", "\"device_limit\""},
                      BadCase{"device_limit:2097151", "at least 2MiB"}, BadCase{"host_cache:1B", "\"host_cache\""},
                      BadCase{"host_cache:1MiB", "at least 2MiB"}));

TEST(Config, TheSmallestBudgetIsOnePage) {
  EXPECT_FALSE(parse_config("device_limit:2MiB").passthrough);
  EXPECT_FALSE(parse_config("host_cache:2MiB").passthrough);
  EXPECT_FALSE(parse_config("host_cache:0").passthrough);  // the default
}

TEST(Config, AMisspeltKeyGetsTheNearestKnownOne) {
  EXPECT_NE(parse_config("devce_limit:8GiB").error.find("did you mean \"device_limit\"?"), std::string::npos);
  EXPECT_NE(parse_config("evcit:on").error.find("did you mean \"evict\"?"), std::string::npos);
  EXPECT_NE(parse_config("Policy:best_fit").error.find("did you mean \"policy\"?"), std::string::npos);
  EXPECT_NE(parse_config("log_fiel:/tmp/x").error.find("did you mean \"log_file\"?"), std::string::npos);
  // Nothing near: a pointer to where the keys are, not a guess.
  const std::string far = parse_config("frobnicate:on").error;
  EXPECT_EQ(far.find("did you mean"), std::string::npos) << far;
  EXPECT_NE(far.find("--help"), std::string::npos) << far;
}

TEST(Config, AMistypedValueGetsTheNearestKnownOne) {
  EXPECT_NE(parse_config("policy:bestfit").error.find("did you mean \"best_fit\"?"), std::string::npos);
  EXPECT_NE(parse_config("prefetch:lern").error.find("did you mean \"learn\"?"), std::string::npos);
  EXPECT_NE(parse_config("log:wrn").error.find("did you mean \"warn\"?"), std::string::npos);
  const std::string far = parse_config("policy:fastest").error;
  EXPECT_EQ(far.find("did you mean"), std::string::npos) << far;
  EXPECT_NE(far.find("one of best_fit"), std::string::npos) << far;
}

TEST(Config, SwitchesTakeTheSpellingsOfOtherTools) {
  // PyTorch's PYTORCH_CUDA_ALLOC_CONF is written expandable_segments:True.
  for (const char* on : {"on", "true", "True", "TRUE", "yes", "Yes", "1", "ON"}) {
    const Config c = parse_config(std::string("evict:") + on);
    EXPECT_FALSE(c.passthrough) << on << ": " << c.error;
    EXPECT_TRUE(c.evict) << on;
  }
  for (const char* off : {"off", "false", "False", "no", "0", "OFF"}) {
    const Config c = parse_config(std::string("evict:") + off);
    EXPECT_FALSE(c.passthrough) << off << ": " << c.error;
    EXPECT_FALSE(c.evict) << off;
  }
  EXPECT_TRUE(parse_config("evict:Tru").passthrough);
  EXPECT_TRUE(parse_config("evict:2").passthrough);
}

bool printable_ascii(const std::string& line) {
  for (char c : line) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) return false;
  }
  return true;
}

TEST(Config, ErrorLinesArePrintableAsciiAndShortWhateverTheInput) {
  const std::string hostile[] = {
      "evict:on\n[tidepool] forged line",
      "policy:\x1b[31mred\x1b[0m",
      std::string(120000, 'k') + ":on",
      "device_limit:" + std::string(120000, '9'),
      std::string("log:\xff\xfe\x80 ") + std::string(5000, '\t'),
      std::string("no colon here ") + std::string(3000, '\r'),
      "a:b,a:b",
      std::string(1, '\0') + "x:y",
  };
  for (const std::string& conf : hostile) {
    const Config c = parse_config(conf);
    ASSERT_TRUE(c.passthrough);
    EXPECT_LE(c.error.size(), kMaxErrorLine) << c.error.size();
    EXPECT_TRUE(printable_ascii(c.error)) << c.error;
    EXPECT_EQ(c.error.rfind("tidepool: TIDEPOOL_CONF: ", 0), 0u) << c.error;
    // The line the preload writes, the consequence included, is as short.
    const std::string line = passthrough_line(c);
    EXPECT_LE(line.size(), kMaxErrorLine) << line.size();
    EXPECT_TRUE(printable_ascii(line)) << line;
    EXPECT_TRUE(line.ends_with("; passing all calls through to the driver")) << line;
  }
}

TEST(Config, ADeviceLimitIsCheckedAgainstTheDevice) {
  constexpr std::uint64_t kDevice = 4 * GiB;
  EXPECT_EQ(check_device_limit(parse_config(""), 0, kDevice), "");
  EXPECT_EQ(check_device_limit(parse_config("device_limit:80%"), 0, kDevice), "");
  EXPECT_EQ(check_device_limit(parse_config("device_limit:4GiB"), 0, kDevice), "");
  const std::string tiny = check_device_limit(parse_config("device_limit:0.0000001%"), 3, kDevice);
  EXPECT_NE(tiny.find("less than 2MiB"), std::string::npos) << tiny;
  EXPECT_NE(tiny.find("device 3"), std::string::npos) << tiny;
  const std::string huge = check_device_limit(parse_config("device_limit:32TiB"), 0, kDevice);
  EXPECT_NE(huge.find("more than the device has"), std::string::npos) << huge;
  EXPECT_LE(huge.size(), kMaxErrorLine);
  EXPECT_TRUE(printable_ascii(huge));
}

// The pool and residency cannot see the options table (it is above them),
// so their option structs keep defaults of their own for direct users (the
// replay tool, the benchmarks, an embedding program). They must be the
// table's.
TEST(Config, TheOptionStructsBelowTheRuntimeDefaultAsTheTableDoes) {
  const AllocatorOptions from_table = allocator_options(parse_config(""), 0);
  const AllocatorOptions plain;
  EXPECT_EQ(from_table.device_limit, plain.device_limit);
  EXPECT_EQ(from_table.evict, plain.evict);
  EXPECT_EQ(from_table.pool.policy, plain.pool.policy);
  EXPECT_EQ(from_table.pool.small_size, plain.pool.small_size);
  EXPECT_EQ(from_table.pool.hold_slack_percent, plain.pool.hold_slack_percent);
  EXPECT_EQ(from_table.pool.free_barrier, plain.pool.free_barrier);
  EXPECT_EQ(from_table.residency.host_cache_bytes, plain.residency.host_cache_bytes);
  EXPECT_EQ(from_table.residency.evict_policy, plain.residency.evict_policy);
  EXPECT_EQ(from_table.residency.learn, plain.residency.learn);
  // And every key reaches them.
  const AllocatorOptions set = allocator_options(
      parse_config("device_limit:3GiB,policy:binned,evict:on,host_cache:1GiB,evict_policy:largest,prefetch:learn,"
                   "free_barrier:off,small_size:64KiB,hold_slack:7%"),
      2);
  EXPECT_EQ(set.device, 2);
  EXPECT_EQ(set.device_limit, 3 * GiB);
  EXPECT_EQ(set.pool.policy, "binned");
  EXPECT_TRUE(set.evict);
  EXPECT_EQ(set.residency.host_cache_bytes, 1 * GiB);
  EXPECT_EQ(set.residency.evict_policy, "largest");
  EXPECT_TRUE(set.residency.learn);
  EXPECT_FALSE(set.pool.free_barrier);
  EXPECT_EQ(set.pool.small_size, 64 * util::KiB);
  EXPECT_EQ(set.pool.hold_slack_percent, 7u);
  // A percentage waits for the device's size.
  EXPECT_EQ(allocator_options(parse_config("device_limit:50%"), 0).device_limit, 0u);
}

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
