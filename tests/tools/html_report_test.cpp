// The HTML report as text: every chart has its container, the best policy is
// marked, names are escaped in the HTML and cannot end the embedded data,
// nothing points off the page, timelines are cut down without losing their
// peak, and the run's metadata is shown. (tests/tools/html_report_browser_test.py
// checks the same report drawn in a browser.)
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "replay.hpp"
#include "reports.hpp"
#include "tools/synthetic_trace.hpp"

namespace tidepool::replay {
namespace {

using testing::kMiB;
constexpr const char* kDataStart = "<script type=\"application/json\" id=\"report-data\">";

std::vector<TraceEvent> training_trace(unsigned seed) {
  testing::TraceBuilder b;
  b.allocate(8 * kMiB);  // weights, kept
  const auto sizes = testing::random_sizes(40, seed, 4 * kMiB);
  for (int step = 0; step < 4; ++step) b.step(sizes);
  return b.events();
}

std::vector<Result> replay_all(const std::vector<std::pair<std::string, std::vector<TraceEvent>>>& traces,
                               const std::vector<std::string>& policies) {
  std::vector<Result> results;
  ReplayOptions options;
  options.want_layout = true;
  for (const auto& [name, events] : traces) {
    for (const std::string& policy : policies) {
      Result r;
      std::string error;
      EXPECT_TRUE(run_replay(name, events, policy, {}, options, &r, &error)) << error;
      results.push_back(std::move(r));
    }
  }
  return results;
}

// The embedded data, parsed: its text ends at the first "</script>", so a
// name that could close the element would break the parse.
nlohmann::json report_data(const std::string& html) {
  const std::size_t start = html.find(kDataStart);
  EXPECT_NE(start, std::string::npos);
  const std::size_t from = start + std::string(kDataStart).size();
  const std::size_t end = html.find("</script>", from);
  EXPECT_NE(end, std::string::npos);
  return nlohmann::json::parse(html.substr(from, end - from));
}

Result made_up(const std::string& trace, const std::string& policy, double utilization, std::uint64_t failed) {
  Result r;
  r.trace = trace;
  r.policy = policy;
  r.events = 77050;
  r.utilization = utilization;
  r.failed_allocations = failed;
  r.peak_live_bytes = 100 * kMiB;
  r.peak_reserved_bytes = static_cast<std::uint64_t>(100.0 * kMiB / utilization);
  r.timeline = {Sample{0, 0, 0}, Sample{10, r.peak_live_bytes, r.peak_reserved_bytes}};
  return r;
}

TEST(HtmlReport, HasEveryChartContainerAndAContentsEntryPerTrace) {
  const auto results = replay_all({{"a/one.csv", training_trace(1)}, {"b/two.csv", training_trace(2)}},
                                  {"best_fit", "pytorch_rules", "cuda_malloc"});
  const std::string html = html_report(results);
  for (const std::string chart :
       {"id=\"chart-utilization\" data-chart=\"utilization\"", "id=\"chart-calls\" data-chart=\"calls\"",
        "id=\"trace-0-timeline-chart\" data-chart=\"timeline\" data-trace=\"0\"",
        "id=\"trace-0-pool-chart\" data-chart=\"pool\" data-trace=\"0\"",
        "id=\"trace-1-timeline-chart\" data-chart=\"timeline\" data-trace=\"1\"",
        "id=\"trace-1-pool-chart\" data-chart=\"pool\" data-trace=\"1\""}) {
    EXPECT_NE(html.find(chart), std::string::npos) << chart;
  }
  EXPECT_EQ(html.find("trace-2"), std::string::npos);
  // Every in-page link has its target.
  const std::regex link("href=\"#([^\"]+)\"");
  int links = 0;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), link); it != std::sregex_iterator(); ++it, ++links) {
    EXPECT_NE(html.find("id=\"" + (*it)[1].str() + "\""), std::string::npos) << (*it)[1].str();
  }
  EXPECT_GE(links, 2 + 2 * 4);
  // The script and its data are inline.
  EXPECT_NE(html.find("window.tidepoolReport"), std::string::npos);
  const nlohmann::json data = report_data(html);
  ASSERT_EQ(data.at("traces").size(), 2u);
  EXPECT_EQ(data.at("policies"), nlohmann::json({"best_fit", "pytorch_rules", "cuda_malloc"}));
  for (const auto& trace : data.at("traces")) {
    ASSERT_EQ(trace.at("runs").size(), 3u);
    for (const auto& run : trace.at("runs")) {
      EXPECT_FALSE(run.at("layout").empty());
      EXPECT_EQ(run.at("reserved").size(), trace.at("t").size());
    }
    // No run failed, so the live bytes agree and are sent once.
    EXPECT_EQ(trace.at("live").size(), trace.at("t").size());
  }
}

TEST(HtmlReport, TheBestPolicyHasTheFewestFailuresThenTheHighestUtilization) {
  const std::vector<Result> results = {made_up("t1.csv", "alpha", 0.99, 3), made_up("t1.csv", "beta", 0.80, 0),
                                       made_up("t1.csv", "gamma", 0.90, 0), made_up("t2.csv", "alpha", 0.95, 0),
                                       made_up("t2.csv", "beta", 0.97, 0),  made_up("t2.csv", "gamma", 0.50, 0)};
  const std::string html = html_report(results);
  const nlohmann::json data = report_data(html);
  EXPECT_EQ(data.at("traces")[0].at("best"), 2);  // gamma: alpha failed allocations
  EXPECT_EQ(data.at("traces")[1].at("best"), 1);  // beta
  const std::regex best_row("<tr class=\"best\"><td class=\"name\"><span class=\"star\">★</span> ([a-z]+)</td>");
  std::vector<std::string> marked;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), best_row); it != std::sregex_iterator(); ++it) {
    marked.push_back((*it)[1].str());
  }
  EXPECT_EQ(marked, (std::vector<std::string>{"gamma", "beta"}));
}

// A baseline stands for another allocator: it is shown, never starred, while
// a tidepool policy ran on the trace.
TEST(HtmlReport, ABaselineIsNeverTheBestWhileATidepoolPolicyRan) {
  const std::vector<Result> results = {
      made_up("t1.csv", "best_fit", 0.90, 0), made_up("t1.csv", "cuda_malloc", 0.99, 0),
      made_up("t2.csv", "rmm_pool", 0.70, 0), made_up("t2.csv", "cuda_malloc", 0.95, 0)};
  const nlohmann::json data = report_data(html_report(results));
  EXPECT_EQ(data.at("traces")[0].at("best"), 0);  // best_fit, though cuda_malloc's utilization is higher
  EXPECT_EQ(data.at("traces")[1].at("best"), 1);  // only baselines ran: the better of them
}

// ... but a baseline ahead of the ★ is pointed out, in the line of winners,
// the summary table and the trace's section, and in the terminal's table.
TEST(HtmlReport, ABaselineAheadOfTheStarIsPointedOutNotHidden) {
  const std::vector<Result> results = {
      made_up("t1.csv", "best_fit", 0.90, 0), made_up("t1.csv", "cuda_malloc", 0.99, 0),
      made_up("t1.csv", "rmm_pool", 0.95, 2),  // fails more: not ahead, whatever its utilization
      made_up("t2.csv", "best_fit", 0.97, 0), made_up("t2.csv", "pytorch_rules", 0.96, 0)};
  const std::string html = html_report(results);
  EXPECT_NE(html.find("(ahead of it, a baseline: cuda_malloc 99.00%)"), std::string::npos);
  EXPECT_EQ(html.find("rmm_pool 95.00%"), std::string::npos);
  EXPECT_NE(html.find("<tr class=\"ahead\"><td class=\"name\">cuda_malloc <span class=\"ahead\""), std::string::npos);
  EXPECT_EQ(html.find("<tr class=\"ahead\"><td class=\"name\">pytorch_rules"), std::string::npos);
  const std::string text = table(results);
  EXPECT_NE(text.find("(t1.csv: ahead of tidepool's best, best_fit 0.9000, is a baseline: cuda_malloc 0.9900)"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("t2.csv: ahead"), std::string::npos) << text;
}

// The sample traces say how they were recorded (PyTorch on the CPU: one
// stream, no cuDNN or cuBLAS workspaces); other traces say nothing.
TEST(HtmlReport, ASampleTraceSaysHowItWasRecorded) {
  Result sample = made_up("data/traces/mobilenet_v2_b32.csv.gz", "best_fit", 0.97, 0);  // 77,050 events
  Result renamed = made_up("mine/mobilenet_v2_b32.csv.gz", "best_fit", 0.97, 0);
  renamed.trace = "other/mobilenet_v2_b32.csv.gz";
  renamed.events = 12;  // the same name, another trace
  Result other = made_up("mine/run.csv", "best_fit", 0.97, 0);
  const std::string html = html_report({sample, renamed, other});
  const std::string note = "tensor allocations recorded on the CPU, so one stream and no cuDNN or cuBLAS";
  std::size_t notes = 0;
  for (std::size_t at = html.find(note); at != std::string::npos; at = html.find(note, at + 1)) ++notes;
  EXPECT_EQ(notes, 1u);
  const std::string text = table({sample, renamed, other});
  EXPECT_NE(text.find("(mobilenet_v2_b32.csv.gz: a sample trace (data/traces): PyTorch's " + note), std::string::npos)
      << text;
  EXPECT_EQ(text.find("run.csv: a sample"), std::string::npos) << text;
}

TEST(HtmlReport, HostileTraceNamesAreEscapedAndCannotEndTheData) {
  // A file name cannot hold '/', so "</script>" can only be a directory:
  // the full path is shown (the run's traces), the file name is in the data.
  const std::string hostile = "<!--<script>alert(1)<img src=x onerror=alert(2)>&\"'.csv";
  const std::string path = "</script><script>alert(3)</script>/" + hostile;
  testing::TraceBuilder b;
  b.step({kMiB, 2 * kMiB});
  const auto results = replay_all({{path, b.events()}}, {"pytorch_rules"});
  ReportRun run;
  run.argv = {"tidepool-replay", path};
  const std::string html = html_report(results, run);
  EXPECT_EQ(html.find("<img src=x"), std::string::npos);
  EXPECT_EQ(html.find("<script>alert"), std::string::npos);
  EXPECT_EQ(html.find("<!--<"), std::string::npos);
  EXPECT_NE(html.find("&lt;!--&lt;script&gt;alert(1)&lt;img src=x onerror=alert(2)&gt;&amp;&quot;&apos;.csv"),
            std::string::npos);
  EXPECT_NE(html.find("&lt;/script&gt;&lt;script&gt;alert(3)&lt;/script&gt;/"), std::string::npos);
  // Exactly the page's own two scripts: the data and the charts.
  std::size_t scripts = 0;
  for (std::size_t at = html.find("<script"); at != std::string::npos; at = html.find("<script", at + 1)) ++scripts;
  EXPECT_EQ(scripts, 2u);
  const nlohmann::json data = report_data(html);
  EXPECT_EQ(data.at("traces")[0].at("name"), hostile);
}

TEST(HtmlReport, NothingOnThePagePointsOffIt) {
  const auto results = replay_all({{"one.csv", training_trace(3)}}, {"best_fit", "rmm_pool"});
  ReportRun run;
  run.options = {{"conf", "see https://example.invalid/x"}};  // text the user gave, shown, never a link
  std::string html = html_report(results, run);
  const std::string given = "see https://example.invalid/x";
  ASSERT_NE(html.find(given), std::string::npos);
  for (std::size_t at = html.find(given); at != std::string::npos; at = html.find(given)) html.erase(at, given.size());
  EXPECT_EQ(html.find("http://"), std::string::npos);
  EXPECT_EQ(html.find("https://"), std::string::npos);
  EXPECT_EQ(html.find("src="), std::string::npos);
  EXPECT_EQ(html.find("<link"), std::string::npos);
  EXPECT_EQ(html.find("@import"), std::string::npos);
  EXPECT_EQ(html.find("url(http"), std::string::npos);
  const std::regex href("href=\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(html.begin(), html.end(), href); it != std::sregex_iterator(); ++it) {
    EXPECT_EQ((*it)[1].str().rfind('#', 0), 0u) << (*it)[1].str();
  }
}

TEST(HtmlReport, TimelinesAreCutToBucketsThatKeepThePeaks) {
  Result a = made_up("t.csv", "alpha", 0.9, 0);
  Result b = made_up("t.csv", "beta", 0.9, 1);
  a.timeline.clear();
  for (std::uint64_t i = 0; i < 100000; ++i) a.timeline.push_back(Sample{i, 1000, 2000});
  a.timeline[54321] = Sample{54321, 7777, 99999};  // one sample's spike
  b.timeline = a.timeline;
  b.timeline[100].live_bytes = 5000;  // a failure made b's live bytes differ
  const nlohmann::json data = report_data(html_report({a, b}));
  const auto& trace = data.at("traces")[0];
  const auto& reserved = trace.at("runs")[0].at("reserved");
  EXPECT_LE(reserved.size(), 1001u);
  EXPECT_GE(reserved.size(), 500u);
  EXPECT_EQ(*std::max_element(reserved.begin(), reserved.end()), 99999);
  EXPECT_EQ(trace.at("t").back(), 99999);  // the last sample closes the series
  EXPECT_TRUE(trace.at("live").is_null());
  EXPECT_EQ(trace.at("runs")[1].at("live").size(), reserved.size());
  EXPECT_EQ(*std::max_element(trace.at("runs")[0].at("live").begin(), trace.at("runs")[0].at("live").end()), 7777);
}

TEST(HtmlReport, FailuresAndTheBudgetReachTheData) {
  Result r = made_up("t.csv", "alpha", 0.9, 2);
  r.failures = {FailedAllocation{5, kMiB, 0, 3, 0, 0}, FailedAllocation{8, kMiB, 0, 9, 0, 0}};
  r.budget_changes = {BudgetChange{0, 64 * kMiB}};
  const nlohmann::json run = report_data(html_report({r})).at("traces")[0].at("runs")[0];
  EXPECT_EQ(run.at("ooms"), nlohmann::json({5, 8}));
  EXPECT_EQ(run.at("budget"), 64 * kMiB);
}

TEST(HtmlReport, ShowsTheRunsMetadata) {
  std::vector<Result> results = {made_up("/data/trace one.csv", "alpha", 0.9, 0)};
  ReportRun run;
  run.version = "9.8.7";
  run.argv = {"tidepool-replay", "--device-limit", "8GiB", "/data/trace one.csv"};
  run.date = "2024-06-01T12:34:56Z";
  run.host = "gpu-box";
  run.options = {{"frees", "device"}, {"device limit", "8GiB"}};
  const std::string html = html_report(results, run);
  for (const std::string text :
       {"<dt>tidepool</dt><dd>9.8.7</dd>", "tidepool-replay --device-limit 8GiB &apos;/data/trace one.csv&apos;",
        "<dd>2024-06-01T12:34:56Z</dd>", "<dd>gpu-box</dd>", "<dt>frees</dt><dd>device</dd>",
        "<dt>device limit</dt><dd>8GiB</dd>", "<td class=\"name\">/data/trace one.csv</td><td>77,050</td>",
        "id=\"run\"", "href=\"#run\""}) {
    EXPECT_NE(html.find(text), std::string::npos) << text;
  }
}

TEST(ReportRun, TakesTheCommandLineAndTheOptionsThatChangeTheFigures) {
  const char* argv[] = {"tidepool-replay", "--frees", "device", "x.csv"};
  TargetOptions target;
  target.frees = FreeMode::device;
  target.device_memory = 8ULL << 30;
  target.conf = "policy:best_fit";
  ReplayOptions replay;
  replay.step_count = 3;
  const ReportRun run = make_report_run(4, argv, target, replay);
  EXPECT_EQ(run.argv, (std::vector<std::string>{"tidepool-replay", "--frees", "device", "x.csv"}));
  EXPECT_FALSE(run.version.empty());
  EXPECT_TRUE(std::regex_match(run.date, std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)"))) << run.date;
  const std::vector<std::pair<std::string, std::string>> want = {
      {"frees", "device"}, {"device limit", "8GiB"}, {"conf", "policy:best_fit"}, {"steps", "3 equal"}};
  EXPECT_EQ(run.options, want);
}

}  // namespace
}  // namespace tidepool::replay

namespace tidepool::replay {
namespace {

Result compared_result(const std::string& trace, const std::string& policy, double util, std::uint64_t reserved) {
  Result r;
  r.trace = trace;
  r.policy = policy;
  r.utilization = util;
  r.peak_reserved_bytes = reserved;
  r.peak_live_bytes = static_cast<std::uint64_t>(util * static_cast<double>(reserved));
  r.events = 10;
  return r;
}

TEST(Comparison, MatchesByFileNamePolicyAndFreesAndNamesWhatOneSideLacks) {
  const std::vector<BaselineRun> before = {{"a.csv", "best_fit", "stream", 0.95, 100 << 20, 0},
                                           {"a.csv", "first_fit", "stream", 0.90, 110 << 20, 2},
                                           {"a.csv", "best_fit", "device", 0.93, 105 << 20, 0}};
  const std::vector<Result> now = {compared_result("/elsewhere/a.csv", "best_fit", 0.97, 98 << 20),
                                   compared_result("/elsewhere/a.csv", "worst_fit", 0.80, 130 << 20)};
  const Comparison c = compare_runs(now, before, "before.jsonl");
  ASSERT_EQ(c.runs.size(), 1u);
  EXPECT_EQ(c.runs[0].trace, "a.csv");
  EXPECT_EQ(c.runs[0].policy, "best_fit");
  EXPECT_DOUBLE_EQ(c.runs[0].before_utilization, 0.95);
  EXPECT_DOUBLE_EQ(c.runs[0].after_utilization, 0.97);
  EXPECT_EQ(c.runs[0].before_peak_reserved, 100u << 20);
  ASSERT_EQ(c.unmatched.size(), 3u);
  EXPECT_EQ(c.unmatched[0], "a.csv worst_fit (frees stream): only in this replay");
  EXPECT_EQ(c.unmatched[1], "a.csv first_fit (frees stream): only in before.jsonl");
  EXPECT_EQ(c.unmatched[2], "a.csv best_fit (frees device): only in before.jsonl");

  // The HTML section: the better utilization and the smaller peak are green.
  const std::string html = html_report(now, {}, &c);
  const auto at = html.find("id=\"changes\"");
  ASSERT_NE(at, std::string::npos);
  const std::string section = html.substr(at, html.find("</section>", at) - at);
  EXPECT_NE(section.find("<td class=\"better\">+2.00 pt</td>"), std::string::npos) << section;
  EXPECT_NE(section.find("<td class=\"better\">-2.00%</td>"), std::string::npos) << section;
  EXPECT_EQ(section.find("class=\"worse\""), std::string::npos);
  EXPECT_NE(section.find("only in this replay"), std::string::npos);
  EXPECT_EQ(html_report(now).find("id=\"changes\""), std::string::npos);  // no --compare, no section
}

TEST(Comparison, ABaselineThatIsNotReplayJsonLinesIsRefusedWithItsLine) {
  const std::string path = ::testing::TempDir() + "/comparison_baseline.jsonl";
  std::vector<BaselineRun> runs;
  std::string error;
  {
    std::ofstream(path)
        << "{\"trace\":\"a.csv\",\"policy\":\"best_fit\",\"utilization\":0.9,\"peak_reserved_bytes\":1}\n"
        << "not json\n";
  }
  EXPECT_FALSE(load_baseline(path, &runs, &error));
  EXPECT_NE(error.find(":2: not a JSON line"), std::string::npos) << error;
  { std::ofstream(path) << "{\"trace\":\"a.csv\",\"policy\":\"best_fit\"}\n"; }
  runs.clear();
  EXPECT_FALSE(load_baseline(path, &runs, &error));
  EXPECT_NE(error.find(":1: a JSON object without"), std::string::npos) << error;
  { std::ofstream(path) << "\n"; }
  runs.clear();
  EXPECT_FALSE(load_baseline(path, &runs, &error));
  EXPECT_NE(error.find("no runs"), std::string::npos) << error;
  runs.clear();
  EXPECT_FALSE(load_baseline("/no/such/file.jsonl", &runs, &error));
  {
    std::ofstream(path) << "{\"trace\":\"/x/a.csv\",\"policy\":\"best_fit\",\"utilization\":0.9,"
                           "\"peak_reserved_bytes\":4096,\"frees\":\"device\",\"failed_allocations\":3}\n";
  }
  runs.clear();
  ASSERT_TRUE(load_baseline(path, &runs, &error)) << error;
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].trace, "a.csv");
  EXPECT_EQ(runs[0].frees, "device");
  EXPECT_EQ(runs[0].failed_allocations, 3u);
}

}  // namespace
}  // namespace tidepool::replay

namespace tidepool::replay {
namespace {

TEST(Comparison, AKeyASideHoldsTwiceIsNamedNotPaired) {
  const std::vector<BaselineRun> before = {{"a.csv", "best_fit", "stream", 0.95, 100 << 20, 0}};
  const std::vector<Result> now = {compared_result("/one/a.csv", "best_fit", 0.97, 98 << 20),
                                   compared_result("/two/a.csv", "best_fit", 0.90, 120 << 20)};
  const Comparison c = compare_runs(now, before, "before.jsonl");
  EXPECT_TRUE(c.runs.empty());
  ASSERT_EQ(c.unmatched.size(), 1u);
  EXPECT_NE(c.unmatched[0].find("more than once"), std::string::npos) << c.unmatched[0];
}

}  // namespace
}  // namespace tidepool::replay
