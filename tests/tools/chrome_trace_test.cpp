// The replay engine's per-allocation records (Result::lifetimes, failures,
// budget_changes) and the Chrome trace-event file made from them: valid
// JSON, one slice per allocate/free pair, out-of-memory and budget markers,
// the slice cap.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "replay.hpp"
#include "reports.hpp"
#include "tools/synthetic_trace.hpp"

namespace tidepool::replay {
namespace {

using testing::kMiB;

Result replay(const std::vector<TraceEvent>& events, const std::string& policy, bool record,
              const TargetOptions& target = {}, const std::string& name = "t.csv") {
  ReplayOptions options;
  options.record_allocations = record;
  Result result;
  std::string error;
  EXPECT_TRUE(run_replay(name, events, policy, target, options, &result, &error)) << error;
  return result;
}

struct Slice {
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
  nlohmann::json args;
  std::string name;
  int begins = 0;
  int ends = 0;
};

// The async slices of one process, keyed by their id.
std::map<std::string, Slice> slices_of(const nlohmann::json& trace, int pid) {
  std::map<std::string, Slice> slices;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("pid") != pid) continue;
    const std::string ph = e.at("ph");
    if (ph != "b" && ph != "e") continue;
    EXPECT_EQ(e.at("cat"), "allocation");
    Slice& s = slices[e.at("id2").at("local").get<std::string>()];
    s.name = e.at("name");
    if (ph == "b") {
      s.begin = e.at("ts");
      s.args = e.at("args");
      s.begins++;
    } else {
      s.end = e.at("ts");
      s.ends++;
    }
  }
  return slices;
}

std::vector<nlohmann::json> events_named(const nlohmann::json& trace, const std::string& name) {
  std::vector<nlohmann::json> out;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.value("name", "") == name) out.push_back(e);
  }
  return out;
}

TEST(ReplayRecords, LifetimesAreRecordedOnlyWhenAsked) {
  testing::TraceBuilder b;
  const auto a = b.allocate(kMiB);      // t=0
  const auto c = b.allocate(2 * kMiB);  // t=1
  b.free(a);                            // t=2
  b.allocate(3 * kMiB);                 // t=3, live at the end
  b.free(c);                            // t=4
  EXPECT_TRUE(replay(b.events(), "pytorch_rules", false).lifetimes.empty());

  const Result r = replay(b.events(), "pytorch_rules", true);
  ASSERT_EQ(r.lifetimes.size(), 3u);
  EXPECT_EQ(r.lifetimes_dropped, 0u);
  EXPECT_EQ(r.lifetimes[0].begin_us, 0u);
  EXPECT_EQ(r.lifetimes[0].end_us, 2u);
  EXPECT_TRUE(r.lifetimes[0].freed);
  EXPECT_EQ(r.lifetimes[0].size, kMiB);
  EXPECT_EQ(r.lifetimes[0].line, 2u);
  EXPECT_EQ(r.lifetimes[1].end_us, 4u);
  EXPECT_EQ(r.lifetimes[2].size, 3 * kMiB);
  EXPECT_FALSE(r.lifetimes[2].freed);
  // Three blocks live together at t=3 in one pool: three distinct addresses.
  EXPECT_NE(r.lifetimes[0].address, r.lifetimes[1].address);
  EXPECT_NE(r.lifetimes[1].address, r.lifetimes[2].address);
  EXPECT_TRUE(r.failures.empty());
  EXPECT_TRUE(r.budget_changes.empty());
}

TEST(ReplayRecords, TheLifetimeCapCountsWhatItLeavesOut) {
  testing::TraceBuilder b;
  for (int i = 0; i < 10; ++i) b.free(b.allocate(kMiB));
  ReplayOptions options;
  options.record_allocations = true;
  options.max_lifetimes = 4;
  Result r;
  std::string error;
  ASSERT_TRUE(run_replay("t.csv", b.events(), "pytorch_rules", {}, options, &r, &error)) << error;
  EXPECT_EQ(r.lifetimes.size(), 4u);
  EXPECT_EQ(r.lifetimes_dropped, 6u);
  for (const Lifetime& l : r.lifetimes) EXPECT_TRUE(l.freed);
}

TEST(ChromeTrace, EveryAllocateFreePairIsOneSliceWithItsSizeAndAddress) {
  testing::TraceBuilder b;
  const auto a = b.allocate(kMiB);
  const auto c = b.allocate(2 * kMiB);
  b.free(a);
  b.allocate(3 * kMiB);
  b.free(c);
  for (const std::string policy : {"pytorch_rules", "best_fit"}) {
    const Result r = replay(b.events(), policy, true);
    const nlohmann::json trace = nlohmann::json::parse(chrome_trace({r}));
    const auto slices = slices_of(trace, 1);
    ASSERT_EQ(slices.size(), 3u) << policy;
    std::map<std::uint64_t, const Slice*> by_size;
    for (const auto& [id, s] : slices) {
      EXPECT_EQ(s.begins, 1) << id;
      EXPECT_EQ(s.ends, 1) << id;
      EXPECT_EQ(s.name, "stream 0");
      by_size[s.args.at("size").get<std::uint64_t>()] = &s;
    }
    ASSERT_EQ(by_size.size(), 3u);
    EXPECT_EQ(by_size[kMiB]->begin, 0u);
    EXPECT_EQ(by_size[kMiB]->end, 2u);
    EXPECT_EQ(by_size[2 * kMiB]->begin, 1u);
    EXPECT_EQ(by_size[2 * kMiB]->end, 4u);
    // Never freed: it ends with the trace and says so.
    EXPECT_EQ(by_size[3 * kMiB]->begin, 3u);
    EXPECT_EQ(by_size[3 * kMiB]->end, 4u);
    EXPECT_TRUE(by_size[3 * kMiB]->args.value("live_at_end", false));
    EXPECT_FALSE(by_size[kMiB]->args.contains("live_at_end"));
    EXPECT_EQ(by_size[kMiB]->args.at("address").get<std::string>().rfind("0x", 0), 0u);
    EXPECT_EQ(by_size[kMiB]->args.at("line"), 2);
    // The counters stay: one per timeline sample.
    EXPECT_EQ(events_named(trace, "memory").size(), r.timeline.size());
    EXPECT_TRUE(events_named(trace, "out of memory").empty());
  }
}

TEST(ChromeTrace, WithoutRecordedLifetimesThereAreCountersAndNoSlices) {
  testing::TraceBuilder b;
  b.step({kMiB, 2 * kMiB});
  const Result r = replay(b.events(), "cuda_malloc", false);
  const nlohmann::json trace = nlohmann::json::parse(chrome_trace({r}));
  EXPECT_TRUE(slices_of(trace, 1).empty());
  const auto counters = events_named(trace, "memory");
  ASSERT_EQ(counters.size(), r.timeline.size());
  EXPECT_EQ(counters.back().at("args").at("live_bytes"), r.timeline.back().live_bytes);
  EXPECT_EQ(counters.back().at("args").at("reserved_bytes"), r.timeline.back().reserved_bytes);
}

TEST(ChromeTrace, ABudgetThatForcesFailuresGivesOutOfMemoryAndBudgetMarkers) {
  testing::TraceBuilder b;
  const auto a = b.allocate(3 * kMiB);  // t=0: 4 MiB of the 6 MiB budget
  b.allocate(3 * kMiB);                 // t=1: refused
  b.free(a);                            // t=2
  b.allocate(3 * kMiB);                 // t=3: fits again
  TargetOptions target;
  target.device_memory = 6 * kMiB;
  const Result r = replay(b.events(), "cuda_malloc", true, target);
  ASSERT_EQ(r.failed_allocations, 1u);
  ASSERT_EQ(r.failures.size(), 1u);
  EXPECT_EQ(r.failures[0].reserved_bytes, 4 * kMiB);  // what the target held when it refused

  const nlohmann::json trace = nlohmann::json::parse(chrome_trace({r}));
  const auto ooms = events_named(trace, "out of memory");
  ASSERT_EQ(ooms.size(), 1u);
  EXPECT_EQ(ooms[0].at("ph"), "i");
  EXPECT_EQ(ooms[0].at("s"), "p");
  EXPECT_EQ(ooms[0].at("ts"), 1);
  EXPECT_EQ(ooms[0].at("args").at("size"), 3 * kMiB);
  EXPECT_EQ(ooms[0].at("args").at("line"), 3);
  EXPECT_EQ(ooms[0].at("args").at("live_bytes"), 3 * kMiB);
  const auto budget = events_named(trace, "device budget");
  ASSERT_EQ(budget.size(), 1u);
  EXPECT_EQ(budget[0].at("ph"), "i");
  EXPECT_EQ(budget[0].at("ts"), 0);
  EXPECT_EQ(budget[0].at("args").at("bytes"), 6 * kMiB);
  // The refused allocation has no slice; the two placed ones do.
  EXPECT_EQ(slices_of(trace, 1).size(), 2u);
}

TEST(ChromeTrace, AProgramsOwnFailedAllocateIsMarkedWhenTheTargetRefusesItToo) {
  std::vector<TraceEvent> events = {
      TraceEvent{0, 5, TraceAction::allocate_failure, 0x10, 64 * kMiB, 0, 2},
  };
  TargetOptions target;
  target.device_memory = 8 * kMiB;
  const Result r = replay(events, "cuda_malloc", true, target);
  const nlohmann::json trace = nlohmann::json::parse(chrome_trace({r}));
  const auto ooms = events_named(trace, "out of memory");
  ASSERT_EQ(ooms.size(), 1u);
  EXPECT_EQ(ooms[0].at("ts"), 5);
}

TEST(ChromeTrace, PastTheCapTheSlicesKeptAreThoseAtTheLivePeak) {
  testing::TraceBuilder b;
  for (int i = 0; i < 400; ++i) b.free(b.allocate(1024));  // small and brief
  std::vector<std::uint64_t> big;
  for (int i = 0; i < 10; ++i) big.push_back(b.allocate(kMiB));  // the live peak
  for (std::uint64_t p : big) b.free(p);
  for (int i = 0; i < 400; ++i) b.free(b.allocate(1024));
  const Result r = replay(b.events(), "pytorch_rules", true);
  ASSERT_EQ(r.lifetimes.size(), 810u);
  ChromeTraceOptions options;
  options.max_slices = 50;
  const nlohmann::json trace = nlohmann::json::parse(chrome_trace({r, r}, options));
  for (int pid : {1, 2}) {
    const auto slices = slices_of(trace, pid);
    ASSERT_EQ(slices.size(), 25u);  // the cap is shared by the two processes
    int big_ones = 0;
    for (const auto& [id, s] : slices) big_ones += s.args.at("size") == kMiB ? 1 : 0;
    EXPECT_EQ(big_ones, 10);
  }
  EXPECT_EQ(trace.at("otherData").at("allocation_slices"), "50");
  EXPECT_EQ(trace.at("otherData").at("allocation_slices_left_out"), "1570");
  bool labelled = false;
  for (const auto& e : events_named(trace, "process_labels")) {
    labelled = labelled || e.at("args").at("labels").get<std::string>().find("25 of 810") != std::string::npos;
  }
  EXPECT_TRUE(labelled);
}

TEST(ChromeTrace, HostileTraceNamesStayValidJson) {
  testing::TraceBuilder b;
  b.step({kMiB});
  const std::string name = std::string("dir/\"quoted\"\\back\n\x01") + "\xff\xfe.csv";
  const Result r = replay(b.events(), "pytorch_rules", true, {}, name);
  const nlohmann::json trace = nlohmann::json::parse(chrome_trace({r}));
  const auto names = events_named(trace, "process_name");
  ASSERT_EQ(names.size(), 1u);
  const std::string shown = names[0].at("args").at("name");
  EXPECT_EQ(shown.rfind("\"quoted\"\\back\n\x01", 0), 0u) << shown;
  EXPECT_NE(shown.find("pytorch_rules"), std::string::npos);
}

}  // namespace
}  // namespace tidepool::replay
