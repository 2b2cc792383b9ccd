// The report, the exit summary and the out-of-memory message of a real
// program run under the preload on the sim (probe_linked's cudaMalloc
// route, which asks for 1 TiB once): what a user of
// `TIDEPOOL_CONF=report:...,log:info` sees, and nothing on the program's
// stdout.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "support/preload.hpp"

namespace {

using tidepool::testing::run_command;
using tidepool::testing::sanitizer_preload_prefix;

struct ProgramRun {
  int status = -1;
  std::string out;
  std::string err;
};

class ReportUnderPreload : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("tidepool-report-preload-" + std::to_string(::getpid()) + "-" +
                                                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  [[nodiscard]] std::string path(const char* name) const { return (dir_ / name).string(); }

  // probe_linked `mode` on the sim, preloaded with `conf` unless it is null.
  ProgramRun run(const std::string& mode, const char* conf) {
    std::string command = "env LD_LIBRARY_PATH=" SIM_DIR " TIDEPOOL_SIM_MEMORY=4GiB ";
    if (conf != nullptr) {
      command +=
          std::string("TIDEPOOL_CONF='") + conf + "' LD_PRELOAD=" + sanitizer_preload_prefix() + TIDEPOOL_LIBRARY + " ";
    } else if (!sanitizer_preload_prefix().empty()) {
      command += "LD_PRELOAD=" + sanitizer_preload_prefix() + " ";
    }
    command += std::string(PROBE_LINKED) + " " + mode + " 2>" + path("stderr.txt");
    ProgramRun r;
    r.status = run_command(command, &r.out);
    std::ifstream err(path("stderr.txt"));
    r.err.assign(std::istreambuf_iterator<char>(err), std::istreambuf_iterator<char>());
    return r;
  }

  std::filesystem::path dir_;
};

TEST_F(ReportUnderPreload, AProgramsRunIsDescribedInTheReportTheSummaryAndTheOomMessage) {
  const std::string conf = "device_limit:64MiB,log:info,report:" + path("run.json") + ",trace:" + path("run.csv");
  const ProgramRun plain = run("runtime", nullptr);
  const ProgramRun r = run("runtime", conf.c_str());
  ASSERT_EQ(plain.status, 42) << plain.err;
  ASSERT_EQ(r.status, 42) << r.err;
  EXPECT_EQ(r.out, plain.out) << "tidepool must never write to the program's stdout";

  // The program's one failed cudaMalloc (1 TiB) is described in full.
  EXPECT_NE(r.err.find("tidepool [warning] device 0: out of memory: cannot allocate 1.00 TiB (1099511627776 bytes): "),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("budget 64.00 MiB (device_limit) of the device's 4.00 GiB"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("to try: no setting makes room for more than the whole device (4.00 GiB)"), std::string::npos)
      << r.err;

  std::ifstream in(path("run.json"));
  ASSERT_TRUE(in.good()) << r.err;
  const auto j = nlohmann::ordered_json::parse(in);
  const auto& run = j["run"];
  EXPECT_EQ(run["argv"], nlohmann::ordered_json::array({PROBE_LINKED, "runtime"}));
  EXPECT_GT(run["pid"].get<long>(), 0);
  EXPECT_NE(run["pid"].get<long>(), ::getpid());
  EXPECT_EQ(run["conf"], conf);
  EXPECT_EQ(run["at_exit"], true);
  EXPECT_EQ(run["config"]["device_limit"], 64 << 20);
  EXPECT_EQ(run["config"]["log"], "info");
  EXPECT_EQ(run["config"]["trace"], path("run.csv"));
  EXPECT_GE(run["end_unix"].get<double>(), run["start_unix"].get<double>());

  const auto& device = j["devices"][0];
  EXPECT_EQ(device.begin().key(), "device");
  EXPECT_EQ(device["ooms"], 1);
  EXPECT_EQ(device["device_limit_bytes"], 64 << 20);
  // The size classes hold every allocation, and the failure in the open class.
  std::int64_t allocations = 0;
  for (const auto& c : device["size_classes"]) allocations += c["allocations"].get<std::int64_t>();
  EXPECT_EQ(allocations, device["allocations"].get<std::int64_t>());
  ASSERT_FALSE(device["size_classes"].empty());
  EXPECT_TRUE(device["size_classes"].back()["max_bytes"].is_null());
  EXPECT_EQ(device["size_classes"].back()["ooms"], 1);

  // Owners: every allocation came from the program's own code, through the
  // hooks (cudaMalloc and the driver's cuMemAlloc alike), the failed one too.
  const auto& owners = device["owners"];
  ASSERT_EQ(owners.size(), 1u) << owners.dump(1);
  EXPECT_EQ(owners[0]["library"], std::filesystem::path(PROBE_LINKED).filename().string());
  EXPECT_EQ(owners[0]["owner"], "program");
  EXPECT_EQ(owners[0]["allocations"], device["allocations"]);
  EXPECT_EQ(owners[0]["failures"], 1);
  EXPECT_EQ(owners[0]["live_at_peak_bytes"], device["peak_live_bytes"]);
  EXPECT_FALSE(owners[0]["call_sites"].empty());
  // The trace names the same owner on each allocation, and none on frees.
  std::ifstream trace(path("run.csv"));
  std::string line;
  ASSERT_TRUE(std::getline(trace, line));
  EXPECT_EQ(line, "Thread,Time,Action,Pointer,Size,Stream,Owner");
  std::size_t allocations_named = 0;
  while (std::getline(trace, line)) {
    const bool allocation = line.find(",allocate,") != std::string::npos;
    if (allocation || line.find(",allocate failure,") != std::string::npos) {
      EXPECT_TRUE(line.ends_with("," + std::filesystem::path(PROBE_LINKED).filename().string())) << line;
      allocations_named += allocation ? 1 : 0;
    } else {
      EXPECT_TRUE(line.ends_with(",")) << line;
    }
  }
  EXPECT_EQ(allocations_named, device["allocations"].get<std::size_t>());

  // The summary, from the same figures.
  const std::string headline = "device 0 at exit: " + std::to_string(device["allocations"].get<long>()) +
                               " allocations, " + std::to_string(device["frees"].get<long>()) + " frees";
  EXPECT_NE(r.err.find("tidepool [info] " + headline), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("1 allocation failed for lack of memory"), std::string::npos) << r.err;
  EXPECT_NE(
      r.err.find(". At the live peak: " + std::filesystem::path(PROBE_LINKED).filename().string() + " (program) "),
      std::string::npos)
      << r.err;
  EXPECT_NE(
      r.err.find("at exit: report written to '" + path("run.json") + "'; trace recorded to '" + path("run.csv") + "'"),
      std::string::npos)
      << r.err;
}

TEST_F(ReportUnderPreload, AtTheDefaultLogLevelThereIsNoSummary) {
  const std::string conf = "report:" + path("run.json");
  const ProgramRun r = run("driver", conf.c_str());
  ASSERT_EQ(r.status, 42) << r.err;
  EXPECT_EQ(r.err.find("at exit"), std::string::npos) << r.err;
  EXPECT_TRUE(std::filesystem::exists(path("run.json")));
}

// A run under the preload gives the same report as a replay: its own trace
// and JSON report, given to tidepool-replay, make one HTML report with the
// run itself (memory by owner, the program named) beside its replay.
TEST_F(ReportUnderPreload, TheRunsTraceAndReportRenderAsOneReplayReport) {
  const std::string conf = "device_limit:64MiB,report:" + path("run.json") + ",trace:" + path("run.csv");
  ASSERT_EQ(run("runtime", conf.c_str()).status, 42);
  std::string out;
  const int status = run_command(std::string(TIDEPOOL_REPLAY) + " --policy best_fit --run-report " + path("run.json") +
                                     " --html " + path("run.html") + " " + path("run.csv") + " 2>" + path("replay.err"),
                                 &out);
  ASSERT_EQ(status, 0) << out;
  const std::string program = std::filesystem::path(PROBE_LINKED).filename().string();
  EXPECT_NE(out.find("The run itself (" + path("run.json") + ", policy best_fit):"), std::string::npos) << out;
  EXPECT_NE(out.find("at the live peak: " + program + " (program)"), std::string::npos) << out;
  EXPECT_NE(out.find("its replay under best_fit: peak reserved"), std::string::npos) << out;
  // The trace's Owner column names the same program.
  EXPECT_NE(out.find("by owner at the live peak: " + program + " (program)"), std::string::npos) << out;
  std::ifstream in(path("run.html"));
  const std::string html((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(html.find("<section id=\"run-itself\">"), std::string::npos);
  EXPECT_NE(html.find("<td>" + program + "</td><td>program</td>"), std::string::npos);
  EXPECT_NE(html.find("data-chart=\"bands\""), std::string::npos);
}

}  // namespace
