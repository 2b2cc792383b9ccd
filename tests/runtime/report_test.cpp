// Specification of the JSON report's keys, which are never renamed once released.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/report.hpp"

namespace tidepool::runtime {
namespace {

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
  for (const char* key : {"device", "allocations", "frees", "live_bytes", "peak_live_bytes", "reserved_bytes",
                          "peak_reserved_bytes", "utilization", "external_fragmentation", "internal_waste_bytes",
                          "ooms", "passthrough_allocations"}) {
    EXPECT_TRUE(dev.contains(key)) << key;
  }
  EXPECT_DOUBLE_EQ(dev["utilization"].get<double>(), 0.9);
  EXPECT_EQ(dev["internal_waste_bytes"], 2);
}

TEST(Report, WritesAtomicallyAndReportsAnUnwritablePath) {
  const std::string path = std::string(::testing::TempDir()) + "/tidepool_report.json";
  ASSERT_TRUE(write_report(Report{}, path).ok());
  std::ifstream in(path);
  EXPECT_EQ(nlohmann::json::parse(in)["version"], 1);
  const auto s = write_report(Report{}, "/nonexistent-dir/report.json");
  EXPECT_EQ(s.error(), util::Error::io_error);
}

}  // namespace
}  // namespace tidepool::runtime
