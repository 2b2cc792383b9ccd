// RunReport (--run-report): a report the runtime writes reads back with every
// figure, owners and call sites included; what is not a tidepool report is
// refused with the reason; the run shows beside the replay of its policy, in
// the table's lines and in the HTML, with hostile names escaped.
#include "run_report.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "reports.hpp"
#include "runtime/runtime.hpp"
#include "synthetic_trace.hpp"

namespace tidepool::replay {
namespace {

using testing::kMiB;

std::string temp_file(const std::string& name, const std::string& text) {
  const std::string path =
      (std::filesystem::path(::testing::TempDir()) / (std::to_string(::getpid()) + "-" + name)).string();
  std::ofstream(path) << text;
  return path;
}

// A report as the runtime writes it: one device, two owners (one library
// with a hostile name), the second of them not known.
std::string written_report() {
  runtime::Report report;
  report.policy = "best_fit";
  report.run.argv = {"python", "train.py"};
  runtime::DeviceReport d;
  d.device = 0;
  d.pool.peak_live_bytes = 12 * kMiB;
  d.pool.live_bytes = 2 * kMiB;
  d.pool.allocations = 3;
  d.owners.allocated(1, 8 * kMiB, true);
  d.owners.allocated(2, 4 * kMiB, true);
  d.owners.freed(1, 8 * kMiB);
  d.owners.allocated(1, 2 * kMiB, false);
  d.owners.failed(2);
  d.owners.settle();
  report.devices.push_back(d);
  report.callers.resize(3);
  report.callers[1].library = "lib<script>evil.so";
  report.callers[1].function = "make_tensor(int)";
  report.callers[1].offset = 0x1234;
  return runtime::report_json(report);
}

TEST(RunReport, AReportTheRuntimeWroteReadsBack) {
  RunReport r;
  std::string error;
  ASSERT_TRUE(load_run_report(temp_file("run.json", written_report()), &r, &error)) << error;
  EXPECT_EQ(r.policy, "best_fit");
  EXPECT_EQ(r.command, "python train.py");
  ASSERT_EQ(r.devices.size(), 1u);
  const RunDevice& d = r.devices[0];
  EXPECT_EQ(d.peak_live_bytes, 12 * kMiB);
  EXPECT_EQ(d.allocations, 3u);
  ASSERT_EQ(d.owners.size(), 2u);
  EXPECT_EQ(d.owners[0].library, "lib<script>evil.so");
  EXPECT_EQ(d.owners[0].live_at_peak_bytes, 8 * kMiB);
  EXPECT_EQ(d.owners[0].live_bytes, 2 * kMiB);
  ASSERT_EQ(d.owners[0].call_sites.size(), 1u);
  EXPECT_EQ(d.owners[0].call_sites[0].function, "make_tensor(int)");
  EXPECT_EQ(d.owners[0].call_sites[0].offset, "0x1234");
  EXPECT_EQ(d.owners[0].call_sites[0].peak_live_bytes, 8 * kMiB);
  EXPECT_EQ(d.owners[1].library, "");
  EXPECT_EQ(d.owners[1].owner, "not known");
  EXPECT_EQ(d.owners[1].failures, 1u);
}

TEST(RunReport, WhatIsNotAReportIsRefusedWithTheReason) {
  RunReport r;
  std::string error;
  EXPECT_FALSE(load_run_report("/no/such/run.json", &r, &error));
  EXPECT_NE(error.find("cannot be read"), std::string::npos) << error;
  EXPECT_FALSE(load_run_report(temp_file("junk.json", "{not json"), &r, &error));
  EXPECT_NE(error.find("not JSON"), std::string::npos) << error;
  EXPECT_FALSE(load_run_report(temp_file("other.json", "[1, 2]"), &r, &error));
  EXPECT_NE(error.find("not a tidepool report"), std::string::npos) << error;
  std::string broken = written_report();
  broken.replace(broken.find("\"peak_reserved_bytes\": 0"), 24, "\"peak_reserved_bytes\": \"big\"");
  EXPECT_FALSE(load_run_report(temp_file("broken.json", broken), &r, &error));
  EXPECT_NE(error.find("\"peak_reserved_bytes\" is not a count"), std::string::npos) << error;
}

TEST(RunReport, TheRunShowsBesideTheReplayOfItsPolicyWithNamesEscaped) {
  RunReport run;
  std::string error;
  ASSERT_TRUE(load_run_report(temp_file("run2.json", written_report()), &run, &error)) << error;
  Result replayed;
  replayed.trace = "run.csv";
  replayed.policy = "best_fit";
  replayed.utilization = 0.95;
  replayed.peak_reserved_bytes = 16 * kMiB;
  const std::string lines = run_report_lines(run, {replayed});
  EXPECT_NE(lines.find("device 0: peak reserved"), std::string::npos) << lines;
  EXPECT_NE(lines.find("at the live peak: lib<script>evil.so (other) 8.0 MiB"), std::string::npos) << lines;
  EXPECT_NE(lines.find("its replay under best_fit: peak reserved 16.0 MiB, utilization 0.9500"), std::string::npos)
      << lines;

  const std::string html = html_report({replayed}, {}, nullptr, &run);
  EXPECT_NE(html.find("<section id=\"run-itself\">"), std::string::npos);
  EXPECT_NE(html.find("href=\"#run-itself\""), std::string::npos);
  EXPECT_EQ(html.find("lib<script>"), std::string::npos) << "a library's name is text, not markup";
  EXPECT_NE(html.find("lib&lt;script&gt;evil.so"), std::string::npos);
  EXPECT_NE(html.find("<code>make_tensor(int)</code>"), std::string::npos);
  EXPECT_NE(html.find("Its replay under <b>best_fit</b> (run.csv): peak reserved 16.0 MiB, utilization 95.00%"),
            std::string::npos);
  // A policy that was not replayed is named, with the flag that adds it.
  replayed.policy = "first_fit";
  const std::string other = html_report({replayed}, {}, nullptr, &run);
  EXPECT_NE(other.find("add <code>--policy best_fit</code>"), std::string::npos);
}

}  // namespace
}  // namespace tidepool::replay
