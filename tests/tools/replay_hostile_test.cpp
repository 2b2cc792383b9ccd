// Specification of the replay tool against hostile traces: traces cut short
// by a killed recorder, malformed lines (clear errors, never a crash),
// absurd sizes (refused on reading; no baseline counter wraps), and traces
// that name tens of thousands of streams.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <fstream>
#include <limits>
#include <random>
#include <string>

#include "replay.hpp"
#include "synthetic_trace.hpp"
#include "target.hpp"
#include "trace_reader.hpp"

namespace tidepool::replay {
namespace {

using testing::ev;
using testing::kMiB;
using testing::kTraceHeader;

constexpr std::uint64_t kMax64 = std::numeric_limits<std::uint64_t>::max();

std::string hostile_path(const std::string& name) {
  return std::string(::testing::TempDir()) + "/tidepool_hostile_" + name;
}

std::string write_bytes(const std::string& name, const std::string& bytes) {
  const std::string path = hostile_path(name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string gzip(const std::string& text) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, Z_BEST_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, text.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// A well-formed line, distinct for each i, as a recorder writes it.
std::string line(std::uint64_t i, const char* action = "allocate") {
  char text[128];
  std::snprintf(text, sizeof text, "0,00:00:%02llu.%06llu,%s,0x%llx,%llu,0x1\n",
                static_cast<unsigned long long>(i / 1000000 % 60), static_cast<unsigned long long>(i % 1000000), action,
                static_cast<unsigned long long>(0x10000 + i * 0x1000), static_cast<unsigned long long>(64 + i));
  return text;
}

// `n` allocations, each line numbered from 2.
std::string trace_of(std::size_t n) {
  std::string text = kTraceHeader;
  for (std::size_t i = 0; i < n; ++i) text += line(i);
  return text;
}

struct Loaded {
  bool ok = false;
  std::vector<TraceEvent> events;
  std::string error;
  std::string warning;
};

Loaded load_file(const std::string& path) {
  Loaded l;
  l.ok = load_trace(path, &l.events, &l.error, &l.warning);
  return l;
}

Loaded load_bytes(const std::string& bytes) {
  Loaded l;
  l.ok = read_trace_buffer(bytes, "mem.csv", &l.events, &l.error, &l.warning);
  return l;
}

bool all_printable(const std::string& text) {
  for (char c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) return false;
  }
  return true;
}

// --- cut short -------------------------------------------------------------

TEST(TraceCutShort, AnUnparsableLastLineWithoutNewlineIsSkippedWithOneWarning) {
  const std::string text = trace_of(3) + "0,00:00:01.0000";  // killed mid-write
  for (const Loaded& l : {load_file(write_bytes("cut.csv", text)), load_bytes(text)}) {
    ASSERT_TRUE(l.ok) << l.error;
    ASSERT_EQ(l.events.size(), 3u);
    EXPECT_EQ(l.events.back().line, 4u);
    EXPECT_NE(l.warning.find(":5: warning:"), std::string::npos) << l.warning;
    EXPECT_NE(l.warning.find("cut short"), std::string::npos) << l.warning;
    EXPECT_EQ(l.warning.find('\n'), std::string::npos) << "one line";
  }
}

TEST(TraceCutShort, AParsableLastLineWithoutNewlineIsKept) {
  std::string text = trace_of(3);
  text.pop_back();  // a hand-written file without the final newline
  const Loaded l = load_bytes(text);
  ASSERT_TRUE(l.ok) << l.error;
  EXPECT_EQ(l.events.size(), 3u);
  EXPECT_TRUE(l.warning.empty()) << l.warning;
}

TEST(TraceCutShort, AMalformedLineInTheMiddleIsStillAnError) {
  const std::string text = trace_of(2) + "0,00:00:01.000000,allocate,0x10,12x,0\n" + line(7);
  const Loaded l = load_bytes(text);
  EXPECT_FALSE(l.ok);
  EXPECT_NE(l.error.find("mem.csv:4: bad size \"12x\""), std::string::npos) << l.error;
  EXPECT_NE(l.error.find("0,00:00:01.000000,allocate,0x10,12x,0"), std::string::npos) << l.error;
  // The same text with a newline-less tail after it: still an error, the tail is not "the last line".
  EXPECT_FALSE(load_bytes(trace_of(2) + "0,00:00:01.000000,allocate,0x10,12x,0\n0,00:0").ok);
}

TEST(TraceCutShort, AGzipStreamCutAnywhereKeepsTheLinesBeforeTheCut) {
  const std::string text = trace_of(20000);
  const std::string gz = gzip(text);
  ASSERT_GT(gz.size(), 4096u);
  for (const std::size_t cut : {gz.size() / 3, gz.size() / 2, gz.size() - 100}) {
    const std::string bytes = gz.substr(0, cut);
    for (const Loaded& l : {load_file(write_bytes("cut.csv.gz", bytes)), load_bytes(bytes)}) {
      ASSERT_TRUE(l.ok) << l.error;
      EXPECT_GT(l.events.size(), 1000u);
      EXPECT_LT(l.events.size(), 20000u);
      for (std::size_t i = 0; i < l.events.size(); ++i) {
        ASSERT_EQ(l.events[i].pointer, 0x10000 + i * 0x1000) << "event " << i << " is not the trace's";
        ASSERT_EQ(l.events[i].size, 64 + i);
      }
      EXPECT_NE(l.warning.find("gzip stream ends early"), std::string::npos) << l.warning;
    }
  }
}

TEST(TraceCutShort, AGzipStreamWithoutItsTrailerKeepsEveryLineAndWarns) {
  const std::string gz = gzip(trace_of(100));
  const Loaded l = load_bytes(gz.substr(0, gz.size() - 8));  // CRC and length gone
  ASSERT_TRUE(l.ok) << l.error;
  EXPECT_EQ(l.events.size(), 100u);
  EXPECT_NE(l.warning.find("gzip stream ends early"), std::string::npos) << l.warning;
  const Loaded whole = load_bytes(gz);
  ASSERT_TRUE(whole.ok) << whole.error;
  EXPECT_EQ(whole.events.size(), 100u);
  EXPECT_TRUE(whole.warning.empty()) << whole.warning;
}

TEST(TraceCutShort, ConcatenatedGzipMembersReadAsOneTrace) {
  const std::string gz = gzip(trace_of(10)) + gzip(line(10) + line(11));
  const Loaded l = load_bytes(gz);
  ASSERT_TRUE(l.ok) << l.error;
  EXPECT_EQ(l.events.size(), 12u);
  EXPECT_FALSE(load_bytes(gz + "junk").ok);
}

// --- malformed input -------------------------------------------------------

std::string error_of(const std::string& bytes) {
  Loaded l;
  EXPECT_NO_THROW(l = load_bytes(bytes));
  EXPECT_FALSE(l.ok) << "accepted: " << bytes.substr(0, 200);
  EXPECT_TRUE(all_printable(l.error)) << l.error;
  EXPECT_LT(l.error.size(), 400u) << l.error;
  return l.error;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(TraceMalformed, EmptyHeaderOnlyAndWrongHeader) {
  EXPECT_TRUE(has(error_of(""), "mem.csv:1: the trace is empty"));
  EXPECT_TRUE(has(error_of(line(0)), "mem.csv:1: the first line is not the header"));
  const Loaded header_only = load_bytes(kTraceHeader);
  ASSERT_TRUE(header_only.ok) << header_only.error;
  EXPECT_TRUE(header_only.events.empty());
  Result result;
  std::string error;
  ASSERT_TRUE(run_replay("empty.csv", header_only.events, "best_fit", {}, {}, &result, &error)) << error;
  EXPECT_EQ(result.events, 0u);
}

TEST(TraceMalformed, NumbersThatWrapOrHaveASignAreRefusedWithTheReason) {
  const std::string h = kTraceHeader;
  EXPECT_TRUE(has(error_of(h + "0,00:00:00.1,allocate,0x10,-5,0\n"), ":2: bad size \"-5\" (negative)"));
  EXPECT_TRUE(has(error_of(h + "0,00:00:00.1,allocate,0x10,18446744073709551616,0\n"), "(out of range)"));
  EXPECT_TRUE(has(error_of(h + "0,00:00:00.1,allocate,0x10,0x10000000000000000,0\n"), "(out of range)"));
  EXPECT_TRUE(has(error_of(h + "0,99999999999999:00:00.1,allocate,0x10,64,0\n"), "bad time"));
  EXPECT_TRUE(has(error_of(h + "0,00:75:00.1,allocate,0x10,64,0\n"), "bad time"));
  EXPECT_TRUE(has(error_of(h + "-1,00:00:00.1,allocate,0x10,64,0\n"), "bad thread id"));
  EXPECT_TRUE(has(error_of(h + "0,00:00:00.1,allocate,0x10,64,-0x1\n"), "bad stream"));
  EXPECT_TRUE(has(error_of(h + "0,00:00:00.1,allocate,0x1ffffffffffffffff,64,0\n"), "bad pointer"));
}

TEST(TraceMalformed, MissingAndExtraFieldsNameTheColumns) {
  const std::string h = kTraceHeader;
  EXPECT_TRUE(has(error_of(h + "0,00:00:00.1,allocate\n"), ":2: expected 6 comma-separated columns"));
  EXPECT_TRUE(has(error_of(h + "0,00:00:00.1,allocate,0x10,64,0,7\n"), "found more"));
  EXPECT_TRUE(has(error_of(h + ",,,,,\n"), ":2: bad thread id"));
}

TEST(TraceMalformed, BinaryJunkIsQuotedAsPrintableAsciiAndCut) {
  std::string junk = "\x01\x02\xff";
  junk += std::string(300, 'A');
  const std::string error = error_of(std::string(kTraceHeader) + line(0) + junk + "\n");
  EXPECT_TRUE(has(error, "mem.csv:3:")) << error;
  EXPECT_TRUE(has(error, "\\x01\\x02\\xff")) << error;
  EXPECT_TRUE(has(error, "...")) << error;
  // Junk with no newline at all is not gathered whole: it is refused past a bound.
  std::string blob(1 << 20, '\0');
  std::mt19937 rng(7);
  for (char& c : blob) {
    c = static_cast<char>(rng() % 255 + 1);
    if (c == '\n') c = 'x';
  }
  EXPECT_TRUE(has(error_of(std::string(kTraceHeader) + blob), "a line of over 1024 bytes"));
  EXPECT_TRUE(has(error_of(blob), "mem.csv:1:"));
  EXPECT_TRUE(has(error_of(std::string("\x1f\x8b") + "not deflate at all"), "corrupt gzip data"));
}

TEST(TraceMalformed, AllocateAndFreeSizesOverWhatADeviceHoldsAreRefusedOnReading) {
  const std::string h = kTraceHeader;
  EXPECT_TRUE(has(error_of(h + "0,00:00:00.1,allocate,0x10,18446744073709551615,0\n"), ":2: bad size"));
  EXPECT_TRUE(has(error_of(h + "0,00:00:00.1,allocate,0x10,64,0\n0,00:00:00.2,free,0x10,0xffffffffffffffff,0\n"),
                  ":3: bad size \"0xffffffffffffffff\" (over 256 TiB"));
  // A refused request may be absurd: programs do ask.
  const Loaded l = load_bytes(h + "0,00:00:00.1,allocate failure,(nil),18446744073709551615,0\n");
  ASSERT_TRUE(l.ok) << l.error;
  EXPECT_EQ(l.events[0].size, kMax64);
}

// Random damage to a valid trace (plain and gzip): the reader answers every
// input with events or with an error naming the input and a line, and throws
// nothing. A pocket version of what the fuzz target does at scale.
TEST(TraceMalformed, RandomlyDamagedTracesGiveEventsOrAnErrorNamingTheLine) {
  const std::string text = trace_of(40) + line(40, "free") + line(41, "allocate failure");
  const std::string gz = gzip(text);
  std::mt19937 rng(2024);
  for (int round = 0; round < 3000; ++round) {
    std::string bytes = round % 2 == 0 ? text : gz;
    const int damage = 1 + static_cast<int>(rng() % 4);
    for (int d = 0; d < damage; ++d) {
      const std::size_t at = rng() % bytes.size();
      switch (rng() % 3) {
        case 0: bytes[at] = static_cast<char>(rng()); break;
        case 1: bytes.erase(at, rng() % 8); break;
        default: bytes.insert(at, 1, static_cast<char>(rng())); break;
      }
      if (bytes.empty()) bytes.push_back('x');  // not `= "x"`: GCC 12's -Wrestrict false positive at -O3
    }
    Loaded l;
    ASSERT_NO_THROW(l = load_bytes(bytes)) << "round " << round;
    if (!l.ok) {
      ASSERT_EQ(l.error.rfind("mem.csv:", 0), 0u) << l.error;
      ASSERT_TRUE(all_printable(l.error)) << l.error;
    }
    for (const TraceEvent& e : l.events) {
      if (e.action != TraceAction::allocate_failure) {
        ASSERT_LE(e.size, runtime::kMaxTraceSize);
      }
    }
  }
}

// --- sizes in the replay ---------------------------------------------------

TEST(ReplaySizes, AFreeWhoseSizeIsNotItsAllocationsIsAnError) {
  for (const std::string& policy : target_names()) {
    Result result;
    std::string error;
    const std::vector<TraceEvent> events = {ev(TraceAction::allocate, 0x10, 64, 2),
                                            ev(TraceAction::free, 0x10, 128, 3)};
    EXPECT_FALSE(run_replay("t.csv", events, policy, {}, {}, &result, &error)) << policy;
    EXPECT_NE(error.find("t.csv:3: free of 0x10 says 128 bytes, but it was allocated with 64 at line 2"),
              std::string::npos)
        << error;
    const std::vector<TraceEvent> absurd = {ev(TraceAction::allocate, 0x10, 64, 2),
                                            ev(TraceAction::free, 0x10, kMax64, 3)};
    EXPECT_FALSE(run_replay("t.csv", absurd, policy, {}, {}, &result, &error)) << policy;
    EXPECT_NE(error.find("t.csv:3: size 18446744073709551615 is over 256 TiB"), std::string::npos) << error;
  }
  // Size 0 on a free means "not recorded", and is taken.
  const std::vector<TraceEvent> unrecorded = {ev(TraceAction::allocate, 0x10, 64, 2),
                                              ev(TraceAction::free, 0x10, 0, 3)};
  Result result;
  std::string error;
  EXPECT_TRUE(run_replay("t.csv", unrecorded, "rmm_pool", {}, {}, &result, &error)) << error;
}

TEST(ReplaySizes, AnAbsurdRefusedRequestFailsWithoutReachingAnyTarget) {
  const std::vector<TraceEvent> events = {
      ev(TraceAction::allocate, 0x10, 64, 2), ev(TraceAction::allocate_failure, 0, kMax64, 3),
      ev(TraceAction::allocate_failure, 0, runtime::kMaxTraceSize + 1, 4), ev(TraceAction::free, 0x10, 64, 5)};
  for (const std::string& policy : target_names()) {
    Result result;
    std::string error;
    ASSERT_TRUE(run_replay("t.csv", events, policy, {}, {}, &result, &error)) << policy << ": " << error;
    EXPECT_EQ(result.failed_allocations, 2u) << policy;
    EXPECT_EQ(result.peak_live_bytes, 64u) << policy;
    EXPECT_LE(result.utilization, 1.0) << policy;
  }
  // Events built by hand get the reader's check too.
  Result result;
  std::string error;
  EXPECT_FALSE(
      run_replay("t.csv", {ev(TraceAction::allocate, 0x10, kMax64, 2)}, "pytorch_rules", {}, {}, &result, &error));
  EXPECT_NE(error.find("t.csv:2: size 18446744073709551615 is over 256 TiB"), std::string::npos) << error;
}

TEST(ReplaySizes, BaselineAccountingCannotWrap) {
  for (const std::string name : {"pytorch_rules", "rmm_pool", "cuda_malloc"}) {
    std::string error;
    auto t = make_target(name, {}, &error);
    ASSERT_NE(t, nullptr) << error;
    std::uint64_t address = 0;
    // Straight to a target, past the replay's checks: refused, nothing counted.
    for (const std::uint64_t size : {kMax64, kMax64 - 511, std::uint64_t{1} << 63}) {
      EXPECT_FALSE(t->allocate(size, 0, &address)) << name << " " << size;
    }
    EXPECT_EQ(t->counters().live_bytes, 0u) << name;
    EXPECT_EQ(t->counters().reserved_bytes, 0u) << name;
    // The largest size a trace may carry is past the replay device's memory,
    // which bounds the baselines as it bounds tidepool's policies.
    EXPECT_FALSE(t->allocate(runtime::kMaxTraceSize, 0, &address)) << name;
    // 1 GiB at a time, until that limit: never past it.
    constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;
    std::uint64_t placed = 0;
    while (placed < 100000 && t->allocate(kGiB, 0, &address)) ++placed;
    EXPECT_GE(placed, kReplayDeviceBytes / kGiB / 4) << name;
    EXPECT_LE(placed, kReplayDeviceBytes / kGiB) << name;
    const Counters c = t->counters();
    EXPECT_EQ(c.live_bytes, placed * kGiB) << name;
    EXPECT_GE(c.reserved_bytes, c.live_bytes) << name;
    EXPECT_GE(c.handed_out_bytes, c.live_bytes) << name;
    EXPECT_LE(c.reserved_bytes, kReplayDeviceBytes) << name;
  }
  // Without the limit (a budget as large as the address line allows), the
  // largest size is placed until the address line is used up, and no
  // counter wraps.
  for (auto make : {&make_pytorch_rules_target, &make_rmm_pool_target, &make_cuda_malloc_target}) {
    auto t = make(0);
    const std::string name = t->name();
    std::uint64_t address = 0;
    std::uint64_t placed = 0;
    while (placed < 100000 && t->allocate(runtime::kMaxTraceSize, 0, &address)) ++placed;
    EXPECT_GT(placed, 1000u) << name;
    EXPECT_LT(placed, 100000u) << name << ": never ran out";
    const Counters c = t->counters();
    EXPECT_EQ(c.live_bytes, placed * runtime::kMaxTraceSize) << name;
    EXPECT_GE(c.reserved_bytes, c.live_bytes) << name;
    EXPECT_GE(c.handed_out_bytes, c.live_bytes) << name;
    EXPECT_LE(c.reserved_bytes, std::uint64_t{1} << 62) << name;
  }
}

TEST(ReplaySizes, AFreeOfAnAllocationTheTargetRefusedIsSkipped) {
  // Served in the program, refused under the replay's budget: its free gives nothing back.
  const std::vector<TraceEvent> events = {
      ev(TraceAction::allocate, 0x10, 30 * kMiB, 2), ev(TraceAction::allocate, 0x20, 30 * kMiB, 3),
      ev(TraceAction::free, 0x20, 30 * kMiB, 4),     ev(TraceAction::allocate, 0x30, kMiB / 2, 5),
      ev(TraceAction::free, 0x10, 30 * kMiB, 6),     ev(TraceAction::free, 0x30, kMiB / 2, 7)};
  TargetOptions options;
  options.device_memory = 40 * kMiB;
  // rmm_pool's first segment (256 MiB) is over this budget: it serves nothing.
  for (const std::string policy : {"best_fit", "pytorch_rules", "cuda_malloc"}) {
    Result result;
    std::string error;
    ASSERT_TRUE(run_replay("t.csv", events, policy, options, {}, &result, &error)) << policy << ": " << error;
    EXPECT_EQ(result.failed_allocations, 1u) << policy;
    EXPECT_EQ(result.peak_live_bytes, 30 * kMiB + kMiB / 2) << policy;
  }
}

// --- many streams ----------------------------------------------------------

// `ids` streams, each allocating once; every allocation is freed on its own
// stream eight allocations later. Sizes cycle through 1..7 pages.
std::vector<TraceEvent> many_streams(std::uint64_t ids, std::uint64_t* peak_live) {
  std::vector<TraceEvent> events;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> live;  // (pointer, stream)
  std::uint64_t live_bytes = 0;
  *peak_live = 0;
  auto size_of = [](std::uint64_t pointer) { return 4096 * (1 + (pointer / 0x1000) % 7); };
  for (std::uint64_t i = 0; i < ids; ++i) {
    const std::uint64_t pointer = 0x100000 + i * 0x1000;
    events.push_back(ev(TraceAction::allocate, pointer, size_of(pointer), events.size() + 2, 0x7000 + i));
    live.emplace_back(pointer, 0x7000 + i);
    live_bytes += size_of(pointer);
    *peak_live = std::max(*peak_live, live_bytes);
    if (live.size() > 8) {
      const auto [p, s] = live.front();
      live.erase(live.begin());
      events.push_back(ev(TraceAction::free, p, size_of(p), events.size() + 2, s));
      live_bytes -= size_of(p);
    }
  }
  for (const auto& [p, s] : live) events.push_back(ev(TraceAction::free, p, size_of(p), events.size() + 2, s));
  return events;
}

TEST(ReplayStreams, TwentyThousandStreamIdsReplayToTheEnd) {
  std::uint64_t peak_live = 0;
  const auto events = many_streams(20000, &peak_live);
  Result result;
  std::string error;
  ASSERT_TRUE(run_replay("streams.csv", events, "best_fit", {}, {}, &result, &error)) << error;
  EXPECT_EQ(result.events, events.size());
  EXPECT_EQ(result.failed_allocations, 0u);
  EXPECT_EQ(result.peak_live_bytes, peak_live);
  EXPECT_GE(result.peak_reserved_bytes, peak_live);
}

// What sharing a stream means to the pool: a block freed on one id is
// reused by another id of the same stream at once, with no event; by an id
// of another stream only through an event. An id past the limit keeps its
// own order: it reuses its own frees at once.
TEST(ReplayStreams, IdsPastTheLimitShareTheFirstStreamsAndKeepTheirOwnOrder) {
  const auto reuse = [](std::size_t limit, std::uint64_t first, std::uint64_t second, DriverCalls* calls) {
    TargetOptions options;
    options.stream_limit = limit;
    std::string error;
    auto t = make_target("best_fit", options, &error);
    EXPECT_NE(t, nullptr) << error;
    std::uint64_t warm = 0;
    std::uint64_t a = 0;
    std::uint64_t b = 0;
    // Every id used once first, so that the streams exist before the counting.
    for (std::uint64_t id : {1, 2, 3}) {
      EXPECT_TRUE(t->allocate(4096, id, &warm));
      t->free(warm, id);
    }
    EXPECT_TRUE(t->allocate(8 * kMiB, first, &a));
    t->free(a, first);
    const DriverCalls before = t->driver_calls();
    EXPECT_TRUE(t->allocate(8 * kMiB, second, &b));
    *calls = t->driver_calls() - before;
    return a == b;
  };
  DriverCalls calls;
  EXPECT_TRUE(reuse(2, 3, 3, &calls));  // id 3 shares id 1's stream, and reuses its own free at once
  EXPECT_EQ(calls.events(), 0u);
  EXPECT_TRUE(reuse(2, 1, 3, &calls));  // ids 1 and 3 are one stream
  EXPECT_EQ(calls.events(), 0u);
  DriverCalls distinct;
  const bool reused = reuse(kDefaultStreamLimit, 1, 3, &distinct);  // two streams: never for free
  EXPECT_TRUE(!reused || distinct.events() > 0) << "reused across streams without an event";
  EXPECT_FALSE(reuse(2, 1, 2, &calls) && calls.events() == 0) << "ids 1 and 2 have streams of their own";
}

}  // namespace
}  // namespace tidepool::replay
