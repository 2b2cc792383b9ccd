// Specification of the JSON report: its keys (never renamed once released),
// their order, the run's metadata and the size classes, on Reports built by
// hand. report_schema_test.cpp holds the report to docs/report.md;
// runtime_report_test.cpp checks the figures of a real run on the sim.
#include "runtime/report.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "util/units.hpp"

namespace tidepool::runtime {
namespace {

using Json = nlohmann::ordered_json;

std::vector<std::string> keys_of(const Json& object) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : object.items()) keys.push_back(key);
  return keys;
}

TEST(Report, HasTheDocumentedKeys) {
  Report report;
  report.policy = "best_fit";
  DeviceReport d;
  d.pool.peak_live_bytes = 90;
  d.pool.peak_reserved_bytes = 100;
  d.pool.live_bytes = 10;
  d.pool.handed_out_bytes = 12;
  report.devices.push_back(d);
  const auto j = nlohmann::json::parse(report_json(report));
  EXPECT_EQ(j["version"], 1);
  const auto& dev = j["devices"][0];
  for (const char* key :
       {"device", "allocations", "frees", "live_bytes", "peak_live_bytes", "reserved_bytes", "peak_reserved_bytes",
        "utilization", "external_fragmentation", "internal_waste_bytes", "ooms", "passthrough_allocations"}) {
    EXPECT_TRUE(dev.contains(key)) << key;
  }
  EXPECT_DOUBLE_EQ(dev["utilization"].get<double>(), 0.9);
  EXPECT_EQ(dev["internal_waste_bytes"], 2);
}

// Every key a release has written stays: readers (the preload tests, the
// Python test, users' scripts) look them up by name.
TEST(Report, KeepsEveryKeyEarlierReleasesWrote) {
  Report report;
  report.devices.push_back(DeviceReport{});
  const auto j = Json::parse(report_json(report));
  for (const char* key : {"version", "tidepool_version", "policy", "passthrough", "devices"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  for (const char* key : {"device",
                          "allocations",
                          "frees",
                          "live_bytes",
                          "peak_live_bytes",
                          "reserved_bytes",
                          "peak_reserved_bytes",
                          "utilization",
                          "external_fragmentation",
                          "internal_waste_bytes",
                          "ooms",
                          "passthrough_allocations",
                          "maps",
                          "unmaps",
                          "parked_reuses",
                          "access_grants",
                          "trims",
                          "spare_bytes",
                          "deferred_bytes",
                          "cross_stream_waits",
                          "device_barriers",
                          "stitching_barriers",
                          "legacy_order_barriers",
                          "handout_barriers",
                          "standing_barriers",
                          "live_blocks",
                          "free_blocks",
                          "segments",
                          "device_limit_bytes",
                          "device_total_bytes",
                          "vmm",
                          "eviction",
                          "evictions",
                          "evicted_bytes",
                          "pin_waits",
                          "prefetches",
                          "prefetched_bytes",
                          "host_resident_launches",
                          "launch_prefetches",
                          "host_resident_bytes",
                          "peak_evicted_bytes",
                          "host_cache_bytes",
                          "host_cache_peak_bytes",
                          "host_cache_limit_bytes",
                          "host_cache_full",
                          "pin_calls",
                          "sync_pins",
                          "residency_gates",
                          "residency_fallbacks",
                          "tracked_moves",
                          "learned_period",
                          "learned_launches",
                          "learned_candidates",
                          "learned_prefetches",
                          "precopies",
                          "precopies_used",
                          "failed_page_moves",
                          "residency_wait_ms",
                          "residency_remap_ms",
                          "sync_pin_ms",
                          "to_host_gbps",
                          "to_device_gbps",
                          "foreign_bytes",
                          "peak_foreign_bytes",
                          "foreign_owners"}) {
    EXPECT_TRUE(j["devices"][0].contains(key)) << key;
  }
}

TEST(Report, KeysComeInADeliberateOrderNotAlphabetically) {
  Report report;
  report.devices.push_back(DeviceReport{});
  const auto j = Json::parse(report_json(report));
  EXPECT_EQ(keys_of(j), (std::vector<std::string>{"version", "tidepool_version", "run", "policy", "passthrough",
                                                  "launches", "devices"}));
  const std::vector<std::string> device = keys_of(j["devices"][0]);
  ASSERT_GE(device.size(), 5u);
  EXPECT_EQ(std::vector<std::string>(device.begin(), device.begin() + 5),
            (std::vector<std::string>{"device", "peak_live_bytes", "peak_reserved_bytes", "utilization", "ooms"}));
  EXPECT_EQ(device.back(), "owners");
  const std::vector<std::string> run = keys_of(j["run"]);
  ASSERT_FALSE(run.empty());
  EXPECT_EQ(run.front(), "pid");
  EXPECT_EQ(run.back(), "config");
}

TEST(Report, RunHoldsTheProcessItsTimesAndTheConfigurationInEffect) {
  Config config = parse_config("device_limit:80%,policy:first_fit,small_size:64KiB,log:info,evict:on");
  ASSERT_FALSE(config.passthrough) << config.error;
  Report report;
  report.run = run_started(config, std::string("device_limit:80%,policy:first_fit"));
  report.run.cuda_lib = "/opt/driver/libcuda.so.1";
  run_ended(report.run);
  const auto j = Json::parse(report_json(report));
  const Json& run = j["run"];

  EXPECT_EQ(run["pid"], ::getpid());
  // argv: this test binary's own command line, argument by argument.
  ASSERT_TRUE(run["argv"].is_array());
  ASSERT_FALSE(run["argv"].empty());
  EXPECT_NE(run["argv"][0].get<std::string>().find("runtime_test"), std::string::npos) << run["argv"].dump();
  char host[HOST_NAME_MAX + 1] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  EXPECT_EQ(run["hostname"], host);

  const std::regex iso(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)");
  EXPECT_TRUE(std::regex_match(run["start_time"].get<std::string>(), iso)) << run["start_time"];
  EXPECT_TRUE(std::regex_match(run["end_time"].get<std::string>(), iso)) << run["end_time"];
  EXPECT_GT(run["start_unix"].get<double>(), 1.6e9);  // after 2020
  EXPECT_GE(run["end_unix"].get<double>(), run["start_unix"].get<double>());
  EXPECT_GE(run["duration_seconds"].get<double>(), 0.0);
  EXPECT_LT(run["duration_seconds"].get<double>(), 60.0);
  EXPECT_EQ(run["at_exit"], false);
  EXPECT_EQ(run["conf"], "device_limit:80%,policy:first_fit");
  EXPECT_TRUE(run["conf_error"].is_null());

  // Every option, typed and resolved, in the options table's order.
  const Json& c = run["config"];
  EXPECT_EQ(c["device_limit"], "80%");
  EXPECT_EQ(c["policy"], "first_fit");
  EXPECT_EQ(c["evict"], true);
  EXPECT_GT(c["host_cache"].get<std::uint64_t>(), 0u) << "the default resolves to half the host's memory";
  EXPECT_EQ(c["evict_policy"], "lru");
  EXPECT_EQ(c["prefetch"], "hints");
  EXPECT_EQ(c["free_barrier"], true);
  EXPECT_EQ(c["small_size"], 64 * 1024);
  EXPECT_EQ(c["hold_slack"], 3);
  EXPECT_TRUE(c["report"].is_null());
  EXPECT_TRUE(c["trace"].is_null());
  EXPECT_EQ(c["log"], "info");
  EXPECT_TRUE(c["log_file"].is_null());
  EXPECT_EQ(c["cuda_lib"], "/opt/driver/libcuda.so.1");
}

TEST(Report, AnAbsoluteDeviceLimitIsInBytesAndAnUnsetOneIsNull) {
  Report report;
  report.run.config = parse_config("device_limit:8GiB,host_cache:4GiB");
  report.run.host_cache_bytes = 4 * util::GiB;
  auto j = Json::parse(report_json(report));
  EXPECT_EQ(j["run"]["config"]["device_limit"], 8 * util::GiB);
  EXPECT_EQ(j["run"]["config"]["host_cache"], 4 * util::GiB);
  report.run.config = parse_config("");
  j = Json::parse(report_json(report));
  EXPECT_TRUE(j["run"]["config"]["device_limit"].is_null());
  EXPECT_TRUE(j["run"]["conf"].is_null()) << "not from the environment";
}

TEST(Report, ARefusedConfigurationSaysWhy) {
  Report report;
  report.run.config = parse_config("polcy:best_fit");
  report.passthrough = true;
  const auto j = Json::parse(report_json(report));
  EXPECT_EQ(j["passthrough"], true);
  EXPECT_NE(j["run"]["conf_error"].get<std::string>().find("did you mean \"policy\""), std::string::npos)
      << j["run"]["conf_error"];
}

TEST(Report, TimesAreIso8601Utc) {
  EXPECT_EQ(iso8601_utc(0), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(iso8601_utc(1'718'000'000'123'456'789), "2024-06-10T06:13:20.123Z");
}

TEST(Report, ReadsThisProcesssCommandLine) {
  const std::vector<std::string> argv = read_cmdline();
  ASSERT_FALSE(argv.empty());
  char self[PATH_MAX] = {};
  ASSERT_GT(::readlink("/proc/self/exe", self, sizeof self - 1), 0);
  // argv[0] names this binary (perhaps by a relative path).
  const std::string name = std::string(self).substr(std::string(self).rfind('/') + 1);
  EXPECT_NE(argv[0].find(name), std::string::npos) << argv[0] << " vs " << self;
}

TEST(Report, SizeClassesListTheUsedClassesSmallestFirst) {
  DeviceReport d;
  pool::SizeHistogram& h = d.size_classes;
  h.allocated(100);
  h.allocated(512);
  h.allocated(513);
  h.freed(100);
  h.allocated(3 * util::MiB);
  h.allocated(2 * util::GiB);
  h.failed(4 * util::GiB);
  Report report;
  report.devices.push_back(d);
  const auto j = Json::parse(report_json(report));
  const Json& classes = j["devices"][0]["size_classes"];
  ASSERT_EQ(classes.size(), 4u) << classes.dump();
  EXPECT_EQ(keys_of(classes[0]), (std::vector<std::string>{"min_bytes", "max_bytes", "allocations", "frees", "live",
                                                           "peak_live", "requested_bytes", "ooms"}));
  EXPECT_EQ(classes[0]["min_bytes"], 1);
  EXPECT_EQ(classes[0]["max_bytes"], 512);
  EXPECT_EQ(classes[0]["allocations"], 2);
  EXPECT_EQ(classes[0]["frees"], 1);
  EXPECT_EQ(classes[0]["live"], 1);
  EXPECT_EQ(classes[0]["peak_live"], 2);
  EXPECT_EQ(classes[0]["requested_bytes"], 612);
  EXPECT_EQ(classes[1]["min_bytes"], 513);
  EXPECT_EQ(classes[1]["max_bytes"], 1024);
  EXPECT_EQ(classes[2]["min_bytes"], 2 * util::MiB + 1);
  EXPECT_EQ(classes[2]["max_bytes"], 4 * util::MiB);
  EXPECT_EQ(classes[2]["requested_bytes"], 3 * util::MiB);
  // Over 1 GiB: one open class, with the failure counted there.
  EXPECT_EQ(classes[3]["min_bytes"], util::GiB + 1);
  EXPECT_TRUE(classes[3]["max_bytes"].is_null());
  EXPECT_EQ(classes[3]["allocations"], 1);
  EXPECT_EQ(classes[3]["ooms"], 1);
}

TEST(SizeHistogram, ClassesArePowersOfTwoFrom512BytesTo1GiB) {
  using H = pool::SizeHistogram;
  EXPECT_EQ(H::kClasses, 23u);
  for (std::size_t c = 0; c + 1 < H::kClasses; ++c) {
    EXPECT_EQ(H::max_bytes(c), std::uint64_t{512} << c);
    EXPECT_EQ(H::class_of(H::max_bytes(c)), c);
    EXPECT_EQ(H::class_of(H::min_bytes(c)), c);
    EXPECT_EQ(H::min_bytes(c + 1), H::max_bytes(c) + 1);
  }
  EXPECT_EQ(H::class_of(SIZE_MAX), H::kClasses - 1);
  EXPECT_EQ(H::max_bytes(H::kClasses - 1), 0u);
}

TEST(SizeHistogram, PeakLiveIsTheMostLiveAtOnce) {
  pool::SizeHistogram h;
  for (int i = 0; i < 5; ++i) h.allocated(4096);
  for (int i = 0; i < 4; ++i) h.freed(4096);
  h.allocated(4000);
  const pool::SizeClassCounts& k = h[pool::SizeHistogram::class_of(4096)];
  EXPECT_EQ(k.allocations, 6u);
  EXPECT_EQ(k.frees, 4u);
  EXPECT_EQ(k.live, 2u);
  EXPECT_EQ(k.peak_live, 5u);
  EXPECT_EQ(k.requested_bytes, 5u * 4096 + 4000);
}

TEST(Report, WritesAtomicallyAndReportsAnUnwritablePath) {
  const std::string path = std::string(::testing::TempDir()) + "/tidepool_report.json";
  ASSERT_TRUE(write_report(Report{}, path).ok());
  std::ifstream in(path);
  EXPECT_EQ(nlohmann::json::parse(in)["version"], 1);
  const auto s = write_report(Report{}, "/nonexistent-dir/report.json");
  EXPECT_EQ(s.error(), util::Error::io_error);
}

TEST(Report, AnArgumentThatIsNotUtf8IsReplacedNotThrownOn) {
  Report report;
  report.run.argv = {"prog", std::string("\xff\xfe", 2)};
  std::string text;
  ASSERT_NO_THROW(text = report_json(report));
  const auto j = Json::parse(text);
  EXPECT_EQ(j["run"]["argv"].size(), 2u);
}

}  // namespace
}  // namespace tidepool::runtime
