// Specification of the replay engine, its baselines and its reports.
#include "replay.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "reports.hpp"
#include "synthetic_trace.hpp"

namespace tidepool::replay {
namespace {

using testing::ev;
using testing::kMiB;

TEST(Baselines, PytorchRulesUseTwoAndTwentyMiBSegments) {
  auto t = make_pytorch_rules_target({});
  std::uint64_t a = 0;
  ASSERT_TRUE(t->allocate(100 * 1024, 0, &a));
  EXPECT_EQ(t->counters().reserved_bytes, 2 * kMiB);
  std::uint64_t b = 0;
  ASSERT_TRUE(t->allocate(5 * kMiB, 0, &b));
  EXPECT_EQ(t->counters().reserved_bytes, 22 * kMiB);
  std::uint64_t c = 0;
  ASSERT_TRUE(t->allocate(5 * kMiB, 0, &c));  // the rest of the 20 MiB segment
  EXPECT_EQ(t->counters().reserved_bytes, 22 * kMiB);
  std::uint64_t d = 0;
  ASSERT_TRUE(t->allocate(11 * kMiB, 0, &d));  // over 10 MiB: rounded to 2 MiB
  EXPECT_EQ(t->counters().reserved_bytes, 34 * kMiB);
  t->free(b, 0);
  std::uint64_t e = 0;
  ASSERT_TRUE(t->allocate(5 * kMiB, 0, &e));
  EXPECT_EQ(e, b);  // cached and reused, never released
}

TEST(Baselines, PytorchRulesReleaseFreeSegmentsOnlyUnderABudget) {
  auto t = make_pytorch_rules_target(40 * kMiB);
  std::uint64_t a = 0;
  std::uint64_t b = 0;
  ASSERT_TRUE(t->allocate(30 * kMiB, 0, &a));
  t->free(a, 0);
  ASSERT_TRUE(t->allocate(36 * kMiB, 0, &b));  // needs the cached 30 MiB segment released first
  EXPECT_EQ(t->counters().reserved_bytes, 36 * kMiB);
  EXPECT_EQ(t->counters().unmaps, 1u);
}

TEST(Baselines, RmmPoolGrowsByDoubling) {
  auto t = make_rmm_pool_target({});
  std::uint64_t a = 0;
  ASSERT_TRUE(t->allocate(200 * kMiB, 0, &a));
  EXPECT_EQ(t->counters().reserved_bytes, 256 * kMiB);
  std::uint64_t b = 0;
  ASSERT_TRUE(t->allocate(100 * kMiB, 0, &b));
  EXPECT_EQ(t->counters().reserved_bytes, 512 * kMiB);
}

TEST(Baselines, CudaMallocNeverReuses) {
  auto t = make_cuda_malloc_target({});
  std::uint64_t a = 0;
  std::uint64_t b = 0;
  ASSERT_TRUE(t->allocate(3 * kMiB, 0, &a));
  EXPECT_EQ(t->counters().reserved_bytes, 4 * kMiB);
  t->free(a, 0);
  EXPECT_EQ(t->counters().reserved_bytes, 0u);
  ASSERT_TRUE(t->allocate(3 * kMiB, 0, &b));
  EXPECT_EQ(t->counters().maps, 2u);
  EXPECT_EQ(t->counters().unmaps, 1u);
}

TEST(Replay, AFreeOfAnUnknownPointerIsAnErrorWithItsLine) {
  std::vector<TraceEvent> events = {ev(TraceAction::allocate, 0x10, 64, 2), ev(TraceAction::free, 0x20, 64, 3)};
  Result result;
  std::string error;
  EXPECT_FALSE(run_replay("t.csv", events, "pytorch_rules", {}, {}, &result, &error));
  EXPECT_NE(error.find("t.csv:3"), std::string::npos) << error;
  EXPECT_NE(error.find("unknown pointer"), std::string::npos) << error;
}

TEST(Replay, FailedAllocationsAreCountedUnderABudget) {
  std::vector<TraceEvent> events = {ev(TraceAction::allocate, 0x10, 30 * kMiB, 2),
                                    ev(TraceAction::allocate, 0x20, 30 * kMiB, 3),
                                    ev(TraceAction::free, 0x10, 30 * kMiB, 4)};
  TargetOptions options;
  options.device_memory = 40 * kMiB;
  for (const std::string policy : {"best_fit", "pytorch_rules", "cuda_malloc"}) {
    Result result;
    std::string error;
    ASSERT_TRUE(run_replay("t.csv", events, policy, options, {}, &result, &error)) << error;
    EXPECT_EQ(result.failed_allocations, 1u) << policy;
    EXPECT_LE(result.peak_reserved_bytes, 40 * kMiB) << policy;
  }
}

TEST(Replay, EveryTraceReplaysUnderEveryPolicyToTheEnd) {
  for (const char* name : {"resnet50_b16.csv.gz", "mobilenet_v2_b32.csv.gz", "seq2seq_b32.csv.gz"}) {
    std::vector<TraceEvent> events;
    std::string error;
    ASSERT_TRUE(load_trace(std::string(TIDEPOOL_TRACES_DIR) + "/" + name, &events, &error)) << error;
    for (const std::string& policy : target_names()) {
      Result result;
      ASSERT_TRUE(run_replay(name, events, policy, {}, {}, &result, &error)) << policy << ": " << error;
      EXPECT_EQ(result.events, events.size());
      EXPECT_EQ(result.failed_allocations, 0u) << name << " " << policy;
      EXPECT_GT(result.utilization, 0.5) << name << " " << policy;
      EXPECT_LE(result.utilization, 1.0) << name << " " << policy;
      std::printf("%-22s %-14s utilization %.4f\n", name, policy.c_str(), result.utilization);
    }
  }
}

std::vector<std::string> sorted_keys(const nlohmann::json& j) {
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  std::sort(keys.begin(), keys.end());
  return keys;
}

std::vector<std::string> sorted(std::vector<std::string> keys) {
  std::sort(keys.begin(), keys.end());
  return keys;
}

TEST(Reports, JsonLinesHaveExactlyTheDocumentedKeys) {
  Result r;
  r.trace = "t.csv";
  r.policy = "best_fit";
  r.steps.resize(2);
  r.steps.back().calls.maps = 3;
  const auto j = nlohmann::json::parse(json_line(r));
  EXPECT_EQ(sorted_keys(j), sorted({"trace",
                                    "policy",
                                    "events",
                                    "peak_live_bytes",
                                    "peak_reserved_bytes",
                                    "utilization",
                                    "external_fragmentation_at_peak",
                                    "internal_waste_at_peak",
                                    "failed_allocations",
                                    "unknown_frees",
                                    "maps",
                                    "unmaps",
                                    "evicted_bytes",
                                    "ns_per_event",
                                    "device_limit_bytes",
                                    "device_limit_given",
                                    "frees",
                                    "lag_us",
                                    "host_us",
                                    "driver_calls",
                                    "last_step",
                                    "steps"}));
  const std::vector<std::string> calls = {"creates",       "maps",          "set_access",   "unmaps",
                                          "releases",      "context_syncs", "stream_syncs", "event_records",
                                          "event_queries", "event_syncs",   "stream_waits", "mem_allocs"};
  EXPECT_EQ(sorted_keys(j["driver_calls"]), sorted(calls));
  const std::vector<std::string> step = {"begin",       "end",         "events",          "vmm",
                                         "syncs",       "event_calls", "peak_live_bytes", "peak_reserved_bytes",
                                         "driver_calls"};
  ASSERT_EQ(j["steps"].size(), 2u);
  for (const auto& s : j["steps"]) EXPECT_EQ(sorted_keys(s), sorted(step));
  EXPECT_EQ(sorted_keys(j["last_step"]), sorted(step));
  EXPECT_EQ(sorted_keys(j["last_step"]["driver_calls"]), sorted(calls));
  EXPECT_EQ(j["last_step"]["vmm"], 3);
  EXPECT_EQ(j["frees"], "stream");
}

TEST(Reports, HtmlIsSelfContainedAndNamesEveryPolicy) {
  std::vector<TraceEvent> events = {ev(TraceAction::allocate, 0x10, 3 * kMiB, 2),
                                    ev(TraceAction::allocate, 0x20, 1000, 3), ev(TraceAction::free, 0x10, 0, 4)};
  std::vector<Result> results;
  ReplayOptions options;
  options.want_layout = true;
  for (const std::string& policy : target_names()) {
    Result r;
    std::string error;
    ASSERT_TRUE(run_replay("tiny.csv", events, policy, {}, options, &r, &error)) << error;
    EXPECT_FALSE(r.peak_layout.empty()) << policy;
    results.push_back(r);
  }
  const std::string html = html_report(results);
  EXPECT_EQ(html.find("http"), std::string::npos);
  EXPECT_EQ(html.find("<script src"), std::string::npos);
  for (const std::string& policy : target_names()) EXPECT_NE(html.find(policy), std::string::npos) << policy;
  EXPECT_NE(html.find("driver calls per step"), std::string::npos);
  EXPECT_NE(html.find("last step vmm calls"), std::string::npos);
  const auto chrome = nlohmann::json::parse(chrome_trace(results));
  EXPECT_FALSE(chrome["traceEvents"].empty());
}

}  // namespace
}  // namespace tidepool::replay
